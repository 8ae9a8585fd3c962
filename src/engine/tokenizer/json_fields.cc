#include "engine/tokenizer/json_fields.h"

#include "common/strings.h"
#include "engine/tokenizer/utf8.h"

namespace exa::engine::json_fields {
namespace {

constexpr size_t kShowBytes = 80;  // Enough to recognise a value; a vocab would flood the log.

std::string Cut(std::string text) {
  if (text.size() <= kShowBytes) return text;
  size_t cut = kShowBytes;
  while (cut > 0 && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text + "...";
}

}  // namespace

std::string Child(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : StrCat(path, ".", key);
}

std::string Child(std::string_view path, size_t index) { return StrCat(path, "[", index, "]"); }

std::string Show(const Json& value) {
  return Cut(value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

std::string Show(std::string_view text) { return Show(Json(std::string(text))); }

absl::Status Error(std::string_view path, const Json& value, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(path, " ", Show(value), ": ", what));
}

absl::Status Missing(std::string_view path) {
  return absl::InvalidArgumentError(StrCat(path, ": required field is missing"));
}

const Json* Find(const Json& object, std::string_view key) {
  auto it = object.find(std::string(key));
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status ExpectObject(const Json& value, std::string_view path) {
  if (value.is_object()) return absl::OkStatus();
  return Error(path, value, "expected an object");
}

absl::Status ExpectArray(const Json& value, std::string_view path) {
  if (value.is_array()) return absl::OkStatus();
  return Error(path, value, "expected an array");
}

absl::StatusOr<std::string> String(const Json& object, std::string_view key,
                                   std::string_view path) {
  const std::string field = Child(path, key);
  const Json* value = Find(object, key);
  if (value == nullptr) return Missing(field);
  if (!value->is_string()) return Error(field, *value, "expected a string");
  return value->get<std::string>();
}

absl::StatusOr<std::optional<std::string>> OptionalString(const Json& object, std::string_view key,
                                                          std::string_view path) {
  const Json* value = Find(object, key);
  if (value == nullptr) return std::optional<std::string>();
  if (!value->is_string()) return Error(Child(path, key), *value, "expected a string or null");
  return std::optional<std::string>(value->get<std::string>());
}

absl::StatusOr<bool> Bool(const Json& object, std::string_view key, std::string_view path,
                          bool default_value) {
  const Json* value = Find(object, key);
  if (value == nullptr) return default_value;
  if (!value->is_boolean()) return Error(Child(path, key), *value, "expected true or false");
  return value->get<bool>();
}

absl::StatusOr<int64_t> IntValue(const Json& value, std::string_view path, int64_t min_value,
                                 int64_t max_value) {
  const std::string range = StrCat("expected an integer in [", min_value, ", ", max_value, "]");
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(max_value)) return Error(path, value, range);
    if (static_cast<int64_t>(v) < min_value) return Error(path, value, range);
    return static_cast<int64_t>(v);
  }
  if (!value.is_number_integer()) return Error(path, value, range);
  const int64_t v = value.get<int64_t>();
  if (v < min_value || v > max_value) return Error(path, value, range);
  return v;
}

absl::StatusOr<int64_t> Int(const Json& object, std::string_view key, std::string_view path,
                            int64_t min_value, int64_t max_value) {
  const std::string field = Child(path, key);
  const Json* value = Find(object, key);
  if (value == nullptr) return Missing(field);
  return IntValue(*value, field, min_value, max_value);
}

absl::StatusOr<char32_t> Char(const Json& object, std::string_view key, std::string_view path) {
  const std::string field = Child(path, key);
  const Json* value = Find(object, key);
  if (value == nullptr) return Missing(field);
  if (value->is_string()) {
    const std::string& s = value->get_ref<const std::string&>();
    const size_t length = s.empty() ? 0 : utf8::ValidSequenceLength(s, 0);
    if (length != 0 && length == s.size()) return utf8::DecodeAt(s, 0, length);
  }
  return Error(field, *value, "expected a string of exactly one character");
}

}  // namespace exa::engine::json_fields
