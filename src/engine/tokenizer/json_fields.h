// Typed access to tokenizer.json fields. Every error names the JSON path of the field and shows
// the offending value, e.g. `pre_tokenizer.pretokenizers[1].type "Foo": unsupported ...`; the
// caller prefixes the file name. Nothing here throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exa::engine::json_fields {

using Json = nlohmann::json;

std::string Child(std::string_view path, std::string_view key);
std::string Child(std::string_view path, size_t index);

// The value as it appears in a message: JSON text, cut to a readable length.
std::string Show(const Json& value);
// A string value as it appears in a message.
std::string Show(std::string_view text);

absl::Status Error(std::string_view path, const Json& value, std::string_view what);
absl::Status Missing(std::string_view path);

// The field, or nullptr when the key is absent or its value is null. `object` must be an object.
const Json* Find(const Json& object, std::string_view key);

absl::Status ExpectObject(const Json& value, std::string_view path);
absl::Status ExpectArray(const Json& value, std::string_view path);

absl::StatusOr<std::string> String(const Json& object, std::string_view key, std::string_view path);
absl::StatusOr<std::optional<std::string>> OptionalString(const Json& object, std::string_view key,
                                                          std::string_view path);
absl::StatusOr<bool> Bool(const Json& object, std::string_view key, std::string_view path,
                          bool default_value);
// Integers in [min_value, max_value].
absl::StatusOr<int64_t> Int(const Json& object, std::string_view key, std::string_view path,
                            int64_t min_value, int64_t max_value);
absl::StatusOr<int64_t> IntValue(const Json& value, std::string_view path, int64_t min_value,
                                 int64_t max_value);
// A string field holding exactly one character (Metaspace.replacement, Strip.content).
absl::StatusOr<char32_t> Char(const Json& object, std::string_view key, std::string_view path);

}  // namespace exa::engine::json_fields
