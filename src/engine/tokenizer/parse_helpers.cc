#include "engine/tokenizer/parse_helpers.h"

#include "common/status.h"
#include "common/strings.h"

namespace exa::engine {

namespace jf = json_fields;

absl::Status CheckDepth(int depth, const std::string& path) {
  if (depth <= kMaxComponentDepth) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat(path, ": components nested more than ", kMaxComponentDepth, " deep"));
}

absl::StatusOr<std::unique_ptr<Regex>> ParsePattern(const jf::Json& node, const std::string& path) {
  const jf::Json* pattern = jf::Find(node, "pattern");
  const std::string& field = path;
  if (pattern == nullptr) return jf::Missing(field);
  EXA_RETURN_IF_ERROR(jf::ExpectObject(*pattern, field));
  if (const jf::Json* literal = jf::Find(*pattern, "String")) {
    if (!literal->is_string())
      return jf::Error(jf::Child(field, "String"), *literal, "expected a string");
    return Regex::Literal(literal->get<std::string>());
  }
  if (const jf::Json* regex = jf::Find(*pattern, "Regex")) {
    if (!regex->is_string())
      return jf::Error(jf::Child(field, "Regex"), *regex, "expected a string");
    auto compiled = Regex::Compile(regex->get<std::string>());
    if (!compiled.ok()) return Annotate(compiled.status(), jf::Child(field, "Regex"));
    return compiled;
  }
  return jf::Error(field, *pattern, "expected {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace exa::engine
