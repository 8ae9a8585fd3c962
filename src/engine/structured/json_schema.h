// Structured outputs (docs/reference/api.md#structured-outputs): a JSON Schema compiled into the
// small grammar that JsonMatcher (json_matcher.h) follows byte by byte. OpenAI's
// `response_format` ({"type": "json_object"} is the schema {"type": "object"}) and vLLM's
// `guided_json` both arrive here.
//
// What a schema may say, and what the output then is:
//   type (a name or a list), nullable, enum, const, anyOf / oneOf (either: one alternative must
//   match), allOf with one member, $ref to a JSON pointer in the same document ("#",
//   "#/$defs/Name", "#/definitions/Name"; recursion allowed), boolean schemas (true: any value);
//   objects: properties, required, additionalProperties (a bool or a schema; absent with
//   properties given it is false, as in OpenAI's strict mode and xgrammar's default);
//   arrays: items (a schema, or false after prefixItems: no more elements), prefixItems,
//   minItems, maxItems; strings: minLength, maxLength (in characters), pattern (regex.h: the
//   whole string matches it, written without \u escapes), format (date, time, date-time,
//   uuid, ipv4, hostname, email held as patterns; with a pattern, or any other format, an
//   annotation); numbers:
//   minimum, maximum, exclusiveMinimum, exclusiveMaximum (number_bounds.h: such numbers are
//   plain decimals of at most 15 significant digits).
// Annotations (title, description, default, examples, $schema, $id, $comment, ...) are
// ignored. Any other keyword (multipleOf, uniqueItems, not, ...) would constrain
// the output in a way this grammar cannot follow: it is an INVALID_ARGUMENT error naming its path
// (e.g. "schema.properties.age.multipleOf: not supported"), never silently dropped.
//
// Output shape: any JSON whitespace between tokens (at most kMaxWhitespaceRun bytes in a row),
// object members in any order, each property at most once, numbers as JSON numbers with at most
// two exponent digits ("integer": no fraction or exponent, at most kMaxIntegerBytes bytes, so it
// fits an int64), strings without \u escapes of surrogates, enum and const values exactly as
// canonical JSON writes them.
//
// Thread safety: a Grammar is immutable once compiled and shared by every sequence that uses it.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/structured/number_bounds.h"
#include "engine/structured/regex.h"

namespace exa::engine::structured {

// Bounds (docs/architecture.md#module-map, rule 5): a schema beyond them is refused when compiled.
inline constexpr size_t kMaxSchemaBytes = 64 << 10;
inline constexpr size_t kMaxSchemaNodes = 1024;
inline constexpr size_t kMaxProperties = 64;  // per object (a bit each while matching)
inline constexpr size_t kMaxLiterals = 64;    // values in one enum
inline constexpr size_t kMaxAlternatives = 16;
inline constexpr int kMaxSchemaDepth = 32;  // nesting of the schema document itself
// Automaton states of all of a schema's patterns together (each at most kMaxRegexDfaStates).
inline constexpr int32_t kMaxPatternStates = 4 * kMaxRegexDfaStates;
// While matching: JSON nesting of the output, and whitespace bytes in a row.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr int kMaxWhitespaceRun = 32;
inline constexpr int kMaxNumberBytes = 40;
inline constexpr int kMaxIntegerBytes = 18;  // "integer": always fits an int64

enum TypeBits : uint8_t {
  kObjectType = 1,
  kArrayType = 2,
  kStringType = 4,
  kNumberType = 8,  // any JSON number
  kIntegerType = 16,
  kBooleanType = 32,
  kNullType = 64,
  kAnyType = 127,
};

inline constexpr int32_t kAnyNode = 0;  // node 0 of every grammar: any JSON value
inline constexpr int32_t kNoNode = -1;  // additionalProperties false

struct Property {
  std::string key;  // the name as it appears between the quotes (JSON-escaped)
  int32_t node = kAnyNode;
};

struct SchemaNode {
  uint8_t types = kAnyType;
  std::vector<std::string> literals;  // enum / const as canonical JSON; non-empty: one of these
  std::vector<int32_t> alternatives;  // anyOf / oneOf; non-empty: one of these nodes
  // Objects.
  std::vector<Property> properties;
  uint64_t required = 0;          // bit i: properties[i] is required
  int32_t additional = kAnyNode;  // schema of other members, or kNoNode
  // Arrays: element i matches prefix_items[i], the rest `items`.
  std::vector<int32_t> prefix_items;
  int32_t items = kAnyNode;
  int64_t min_items = 0;
  int64_t max_items = std::numeric_limits<int64_t>::max();
  // Strings, in characters.
  int64_t min_length = 0;
  int64_t max_length = std::numeric_limits<int64_t>::max();
  // Strings: the index of their pattern's automaton in Grammar::patterns, which holds the length
  // bounds too (min_length and max_length are then left unbounded); -1: none.
  int32_t pattern = -1;
  // Numbers: minimum / maximum and their exclusive forms; nullopt: none.
  std::optional<NumberBounds> bounds;

  bool counts_length() const {
    return min_length > 0 || max_length != std::numeric_limits<int64_t>::max();
  }
};

struct Grammar {
  std::vector<SchemaNode> nodes;  // nodes[kAnyNode] is any value
  int32_t root = kAnyNode;
  // Text the output holds before and after the value, byte for byte (a forced tool call's
  // "<tool_call>\n" and "\n</tool_call>"); empty for a bare value.
  std::string prefix;
  std::string suffix;
  // The output is the root's literal alone, byte for byte, with no whitespace around it (a
  // choice among strings, CompileChoice), or text its pattern matches (CompileRegexGrammar);
  // false: a JSON value.
  bool bare = false;
  std::vector<ByteDfa> patterns;  // SchemaNode::pattern indexes them
};

// Compiles `schema_json` (the text of a JSON Schema). Errors name the keyword's path under
// "schema", e.g. "schema.properties.name.pattern: not supported; supported: ...".
absl::StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(std::string_view schema_json,
                                                                 std::string_view prefix = "",
                                                                 std::string_view suffix = "");
inline constexpr size_t kMaxAffixBytes = 256;  // prefix and suffix, each

// vLLM's guided_choice: the output is exactly one of `choices` as plain text (not JSON-quoted).
// INVALID_ARGUMENT when there are none or more than kMaxLiterals, when one is empty or begins
// with whitespace, or when together they pass kMaxSchemaBytes.
absl::StatusOr<std::shared_ptr<const Grammar>> CompileChoice(
    const std::vector<std::string>& choices);

// vLLM's guided_regex: the output is plain text that `pattern` (regex.h) matches whole.
// INVALID_ARGUMENT names what in the pattern is wrong or unsupported, and is returned when no
// text but the empty one matches.
absl::StatusOr<std::shared_ptr<const Grammar>> CompileRegexGrammar(std::string_view pattern);

// The schema of OpenAI's {"type": "json_object"}: any JSON object.
inline constexpr std::string_view kJsonObjectSchema = R"({"type":"object"})";

}  // namespace exa::engine::structured
