// Pieces of tokenizer.json parsing shared by the component parsers.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/json_fields.h"
#include "engine/tokenizer/regex.h"

namespace exa::engine {

// Sequences may nest; real files nest two deep. The bound keeps a hostile file from recursing
// our parser off the stack.
inline constexpr int kMaxComponentDepth = 16;

absl::Status CheckDepth(int depth, const std::string& path);

// A `pattern` object: {"String": "literal"} or {"Regex": "oniguruma pattern"}.
absl::StatusOr<std::unique_ptr<Regex>> ParsePattern(const json_fields::Json& node,
                                                    const std::string& path);

}  // namespace exa::engine
