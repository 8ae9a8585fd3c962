#include "engine/structured/json_schema.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace exa::engine::structured {
namespace {

using json = nlohmann::json;

// Keywords that say nothing about which values match (JSON Schema's annotations, OpenAPI's and
// pydantic's extras): ignored.
bool IsAnnotation(const std::string& k) {
  static const char* const kNames[] = {
      "title",     "description",   "default",  "examples",         "example",         "format",
      "$schema",   "$id",           "$comment", "$anchor",          "deprecated",      "readOnly",
      "writeOnly", "discriminator", "strict",   "contentMediaType", "contentEncoding", "name"};
  return std::find(std::begin(kNames), std::end(kNames), k) != std::end(kNames);
}

// JSON Schema's `format`s that a pattern can hold (regex.h), as OpenAI's strict mode enforces
// them: RFC 3339 dates, times and date-times (upper-case T and Z), RFC 4122 UUIDs, dotted-quad
// IPv4, RFC 1123 host names and e-mail addresses in their common dot-atom form. The calendar
// is not checked (a February 30th passes). Any other format stays an annotation.
const char* FormatPattern(std::string_view format) {
  static constexpr std::string_view kDate = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
  static constexpr std::string_view kTime =
      R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static constexpr std::string_view kLabel = R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
  static const std::string kDateTime = StrCat(kDate, "T", kTime);
  static const std::string kHostname = StrCat(kLabel, R"((\.)", kLabel, ")*");
  static const std::string kEmail =
      StrCat(R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@)", kLabel,
             R"((\.)", kLabel, ")+");
  static const std::pair<std::string_view, std::string> kFormats[] = {
      {"date", std::string(kDate)},
      {"time", std::string(kTime)},
      {"date-time", kDateTime},
      {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
      {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
      {"hostname", kHostname},
      {"email", kEmail},
  };
  for (const auto& [name, pattern] : kFormats) {
    if (name == format) return pattern.c_str();
  }
  return nullptr;
}

constexpr std::string_view kSupported =
    "type, nullable, enum, const, anyOf, oneOf, allOf (one member), $ref, $defs, definitions, "
    "properties, required, additionalProperties, items, prefixItems, minItems, maxItems, "
    "minLength, maxLength, pattern, minimum, maximum, exclusiveMinimum, exclusiveMaximum";

class Compiler {
 public:
  Compiler(const json& root, std::string_view prefix, std::string_view suffix) : root_(root) {
    grammar_ = std::make_shared<Grammar>();
    grammar_->nodes.emplace_back();  // kAnyNode
    grammar_->prefix = std::string(prefix);
    grammar_->suffix = std::string(suffix);
  }

  absl::StatusOr<std::shared_ptr<const Grammar>> Run() {
    EXA_ASSIGN_OR_RETURN(grammar_->root, Compile(root_, "schema", 0));
    return std::shared_ptr<const Grammar>(std::move(grammar_));
  }

 private:
  absl::StatusOr<int32_t> NewNode(const std::string& path) {
    if (grammar_->nodes.size() >= kMaxSchemaNodes) {
      return absl::InvalidArgumentError(
          StrCat(path, ": the schema has more than ", kMaxSchemaNodes, " subschemas"));
    }
    grammar_->nodes.emplace_back();
    return static_cast<int32_t>(grammar_->nodes.size() - 1);
  }

  absl::StatusOr<int32_t> Compile(const json& s, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) {
      return absl::InvalidArgumentError(
          StrCat(path, ": nested deeper than ", kMaxSchemaDepth, " levels"));
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return kAnyNode;
      return absl::InvalidArgumentError(StrCat(path, ": the schema false matches nothing"));
    }
    if (!s.is_object()) {
      return absl::InvalidArgumentError(
          StrCat(path, ": a schema is an object or a boolean, not ", s.type_name()));
    }
    for (const auto& [k, v] : s.items()) {
      static const char* const kKeywords[] = {"type",
                                              "nullable",
                                              "enum",
                                              "const",
                                              "anyOf",
                                              "oneOf",
                                              "allOf",
                                              "$ref",
                                              "$defs",
                                              "definitions",
                                              "properties",
                                              "required",
                                              "additionalProperties",
                                              "items",
                                              "prefixItems",
                                              "minItems",
                                              "maxItems",
                                              "minLength",
                                              "maxLength",
                                              "pattern",
                                              "minimum",
                                              "maximum",
                                              "exclusiveMinimum",
                                              "exclusiveMaximum"};
      if (IsAnnotation(k)) continue;
      if (std::find(std::begin(kKeywords), std::end(kKeywords), k) == std::end(kKeywords)) {
        return absl::InvalidArgumentError(
            StrCat(path, ".", k, ": not supported; supported: ", kSupported));
      }
    }
    if (auto it = s.find("$ref"); it != s.end()) return Reference(s, *it, path, depth);
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) {
        return absl::InvalidArgumentError(
            StrCat(path, ".allOf: only a list of one schema is supported"));
      }
      if (s.contains("anyOf") || s.contains("oneOf") || s.contains("type")) {
        return absl::InvalidArgumentError(
            StrCat(path, ".allOf: cannot be combined with type, anyOf or oneOf here"));
      }
      return Compile((*it)[0], StrCat(path, ".allOf[0]"), depth + 1);
    }
    EXA_ASSIGN_OR_RETURN(const int32_t index, NewNode(path));
    EXA_RETURN_IF_ERROR(Fill(s, path, depth, index));
    return index;
  }

  absl::StatusOr<int32_t> Reference(const json& s, const json& ref, const std::string& path,
                                    int depth) {
    if (!ref.is_string() || !ref.get<std::string>().starts_with("#")) {
      return absl::InvalidArgumentError(
          StrCat(path, ".$ref: a JSON pointer into this schema (\"#/$defs/Name\") is supported"));
    }
    for (const auto& [k, v] : s.items()) {
      if (k != "$ref" && k != "$defs" && k != "definitions" && !IsAnnotation(k)) {
        return absl::InvalidArgumentError(StrCat(path, ".", k, ": cannot be combined with $ref"));
      }
    }
    const std::string pointer = ref.get<std::string>().substr(1);
    if (auto it = refs_.find(pointer); it != refs_.end()) return it->second;
    const json* target = nullptr;
    try {
      target = &root_.at(json::json_pointer(pointer));
    } catch (const json::exception&) {
      return absl::InvalidArgumentError(
          StrCat(path, ".$ref: \"", ref.get<std::string>(), "\" names nothing in the schema"));
    }
    if (target->is_boolean() || !target->contains("$ref")) {
      // Reserve the node first so a recursive schema refers back to it.
      if (target->is_boolean()) return Compile(*target, path, depth + 1);
      EXA_ASSIGN_OR_RETURN(const int32_t index, NewNode(path));
      refs_[pointer] = index;
      EXA_ASSIGN_OR_RETURN(const int32_t body,
                           Compile(*target, StrCat(path, "->", ref.get<std::string>()), depth + 1));
      grammar_->nodes[static_cast<size_t>(index)].alternatives = {body};
      return index;
    }
    if (++ref_hops_ > static_cast<int>(kMaxSchemaNodes)) {
      return absl::InvalidArgumentError(StrCat(path, ".$ref: references form a cycle"));
    }
    return Compile(*target, path, depth + 1);
  }

  absl::Status Fill(const json& s, const std::string& path, int depth, int32_t index) {
    uint8_t types = kAnyType;
    if (auto it = s.find("type"); it != s.end()) {
      EXA_ASSIGN_OR_RETURN(types, Types(*it, StrCat(path, ".type")));
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties")) {
      types = kObjectType;
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems")) {
      types = kArrayType;
    }
    if (s.value("nullable", false)) types |= kNullType;
    auto node = [&]() -> SchemaNode& { return grammar_->nodes[static_cast<size_t>(index)]; };
    node().types = types;
    if (s.contains("enum") || s.contains("const")) {
      std::vector<std::string> literals;
      if (auto it = s.find("const"); it != s.end()) literals.push_back(it->dump());
      if (auto it = s.find("enum"); it != s.end()) {
        if (!it->is_array() || it->empty() || it->size() > kMaxLiterals) {
          return absl::InvalidArgumentError(
              StrCat(path, ".enum: a list of 1 to ", kMaxLiterals, " values"));
        }
        for (const json& v : *it) literals.push_back(v.dump());
      }
      node().literals = std::move(literals);
      return absl::OkStatus();
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty() || it->size() > kMaxAlternatives) {
        return absl::InvalidArgumentError(
            StrCat(path, ".", key, ": a list of 1 to ", kMaxAlternatives, " schemas"));
      }
      std::vector<int32_t> alternatives;
      for (size_t i = 0; i < it->size(); ++i) {
        EXA_ASSIGN_OR_RETURN(int32_t alt,
                             Compile((*it)[i], StrCat(path, ".", key, "[", i, "]"), depth + 1));
        alternatives.push_back(alt);
      }
      node().alternatives = std::move(alternatives);
      return absl::OkStatus();
    }
    if (types & (kNumberType | kIntegerType)) {
      EXA_ASSIGN_OR_RETURN(node().bounds, ReadNumberBounds(s, path, (types & kNumberType) == 0));
    }
    EXA_RETURN_IF_ERROR(FillObject(s, path, depth, index));
    EXA_RETURN_IF_ERROR(FillArray(s, path, depth, index));
    EXA_ASSIGN_OR_RETURN(node().min_length, Count(s, "minLength", 0, path));
    EXA_ASSIGN_OR_RETURN(node().max_length,
                         Count(s, "maxLength", std::numeric_limits<int64_t>::max(), path));
    if (node().min_length > node().max_length) {
      return absl::InvalidArgumentError(StrCat(path, ".minLength: more than maxLength"));
    }
    if (auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) {
        return absl::InvalidArgumentError(
            StrCat(path, ".pattern: a regular expression as a string, not ", it->dump()));
      }
      return Pattern(it->get<std::string>(), StrCat(path, ".pattern"), index);
    }
    if (auto it = s.find("format"); it != s.end() && it->is_string()) {
      if (const char* pattern = FormatPattern(it->get<std::string>())) {
        return Pattern(pattern, StrCat(path, ".format"), index);
      }
    }
    return absl::OkStatus();
  }

  // A string's pattern, with its length bounds folded into the automaton; `path` names the
  // keyword it came from.
  absl::Status Pattern(const std::string& pattern, const std::string& path, int32_t index) {
    SchemaNode& n = grammar_->nodes[static_cast<size_t>(index)];
    if ((n.types & kStringType) == 0) return absl::OkStatus();  // applies to strings only
    RegexOptions options{
        .json_string = true, .min_length = n.min_length, .max_length = n.max_length};
    absl::StatusOr<ByteDfa> dfa = CompileRegex(pattern, options);
    if (!dfa.ok()) {
      return absl::InvalidArgumentError(StrCat(path, ": ", dfa.status().message()));
    }
    pattern_states_ += dfa->states();
    if (pattern_states_ > kMaxPatternStates) {
      return absl::InvalidArgumentError(StrCat(path, ": the schema's patterns need more than ",
                                               kMaxPatternStates, " automaton states together"));
    }
    n.pattern = static_cast<int32_t>(grammar_->patterns.size());
    n.min_length = 0;
    n.max_length = std::numeric_limits<int64_t>::max();
    grammar_->patterns.push_back(*std::move(dfa));
    return absl::OkStatus();
  }

  absl::Status FillObject(const json& s, const std::string& path, int depth, int32_t index) {
    std::vector<Property> properties;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object() || it->size() > kMaxProperties) {
        return absl::InvalidArgumentError(
            StrCat(path, ".properties: an object of at most ", kMaxProperties, " schemas"));
      }
      for (const auto& [name, sub] : it->items()) {
        Property p;
        const std::string quoted = json(name).dump();
        p.key = quoted.substr(1, quoted.size() - 2);
        EXA_ASSIGN_OR_RETURN(p.node, Compile(sub, StrCat(path, ".properties.", name), depth + 1));
        properties.push_back(std::move(p));
      }
    }
    int32_t additional = properties.empty() ? kAnyNode : kNoNode;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean()) {
        additional = it->get<bool>() ? kAnyNode : kNoNode;
      } else {
        EXA_ASSIGN_OR_RETURN(additional,
                             Compile(*it, StrCat(path, ".additionalProperties"), depth + 1));
      }
    }
    uint64_t required = 0;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) {
        return absl::InvalidArgumentError(StrCat(path, ".required: a list of property names"));
      }
      for (const json& name : *it) {
        const std::string quoted = name.is_string() ? name.dump() : std::string();
        auto p = std::find_if(properties.begin(), properties.end(), [&](const Property& q) {
          return quoted.size() >= 2 && q.key == quoted.substr(1, quoted.size() - 2);
        });
        if (p == properties.end()) {
          return absl::InvalidArgumentError(
              StrCat(path, ".required: ", name.dump(), " is not one of the object's properties"));
        }
        required |= uint64_t{1} << (p - properties.begin());
      }
    }
    SchemaNode& node = grammar_->nodes[static_cast<size_t>(index)];
    node.properties = std::move(properties);
    node.additional = additional;
    node.required = required;
    return absl::OkStatus();
  }

  absl::Status FillArray(const json& s, const std::string& path, int depth, int32_t index) {
    std::vector<int32_t> prefix_items;
    if (auto it = s.find("prefixItems"); it != s.end()) {
      if (!it->is_array() || it->size() > kMaxProperties) {
        return absl::InvalidArgumentError(
            StrCat(path, ".prefixItems: a list of at most ", kMaxProperties, " schemas"));
      }
      for (size_t i = 0; i < it->size(); ++i) {
        EXA_ASSIGN_OR_RETURN(int32_t item,
                             Compile((*it)[i], StrCat(path, ".prefixItems[", i, "]"), depth + 1));
        prefix_items.push_back(item);
      }
    }
    int32_t items = kAnyNode;
    EXA_ASSIGN_OR_RETURN(const int64_t min_items, Count(s, "minItems", 0, path));
    EXA_ASSIGN_OR_RETURN(int64_t max_items,
                         Count(s, "maxItems", std::numeric_limits<int64_t>::max(), path));
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) {
        return absl::InvalidArgumentError(
            StrCat(path, ".items: a list of schemas (draft 4 tuples): use prefixItems"));
      }
      if (it->is_boolean() && !it->get<bool>()) {
        // No elements past prefixItems.
        max_items = std::min(max_items, static_cast<int64_t>(prefix_items.size()));
      } else {
        EXA_ASSIGN_OR_RETURN(items, Compile(*it, StrCat(path, ".items"), depth + 1));
      }
    }
    if (min_items > max_items) {
      return absl::InvalidArgumentError(StrCat(path, ".minItems: more than maxItems",
                                               s.contains("items") ? " (or items false)" : ""));
    }
    SchemaNode& node = grammar_->nodes[static_cast<size_t>(index)];
    node.prefix_items = std::move(prefix_items);
    node.items = items;
    node.min_items = min_items;
    node.max_items = max_items;
    return absl::OkStatus();
  }

  static absl::StatusOr<int64_t> Count(const json& s, const char* key, int64_t absent,
                                       const std::string& path) {
    auto it = s.find(key);
    if (it == s.end()) return absent;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return absl::InvalidArgumentError(
          StrCat(path, ".", key, ": a non-negative integer, not ", it->dump()));
    }
    return it->get<int64_t>();
  }

  static absl::StatusOr<uint8_t> Types(const json& t, const std::string& path) {
    auto one = [&](const json& name) -> absl::StatusOr<uint8_t> {
      static const std::pair<const char*, uint8_t> kTypes[] = {
          {"object", kObjectType}, {"array", kArrayType},     {"string", kStringType},
          {"number", kNumberType}, {"integer", kIntegerType}, {"boolean", kBooleanType},
          {"null", kNullType}};
      for (const auto& [n, bit] : kTypes) {
        if (name.is_string() && name.get<std::string>() == n) return bit;
      }
      return absl::InvalidArgumentError(StrCat(
          path, ": ", name.dump(),
          " is not a type; types are object, array, string, number, integer, boolean, null"));
    };
    if (!t.is_array()) return one(t);
    if (t.empty()) return absl::InvalidArgumentError(StrCat(path, ": an empty list of types"));
    uint8_t bits = 0;
    for (const json& name : t) {
      EXA_ASSIGN_OR_RETURN(const uint8_t bit, one(name));
      bits |= bit;
    }
    return bits;
  }

  const json& root_;
  std::shared_ptr<Grammar> grammar_;
  absl::flat_hash_map<std::string, int32_t> refs_;
  int ref_hops_ = 0;
  int32_t pattern_states_ = 0;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> CompileChoice(
    const std::vector<std::string>& choices) {
  if (choices.empty() || choices.size() > kMaxLiterals) {
    return absl::InvalidArgumentError(
        StrCat("a list of 1 to ", kMaxLiterals, " strings, not ", choices.size()));
  }
  size_t bytes = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const std::string& c = choices[i];
    bytes += c.size();
    if (c.empty() || c.find_first_of(" \t\r\n") == 0) {
      return absl::InvalidArgumentError(
          StrCat("choice ", i, " is empty or begins with whitespace"));
    }
  }
  if (bytes > kMaxSchemaBytes) {
    return absl::InvalidArgumentError(
        StrCat(bytes, " bytes of choices; at most ", kMaxSchemaBytes));
  }
  auto grammar = std::make_shared<Grammar>();
  grammar->nodes.emplace_back();  // kAnyNode
  grammar->nodes.emplace_back().literals = choices;
  grammar->root = 1;
  grammar->bare = true;
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

absl::StatusOr<std::shared_ptr<const Grammar>> CompileRegexGrammar(std::string_view pattern) {
  EXA_ASSIGN_OR_RETURN(ByteDfa dfa, CompileRegex(pattern));
  if (!dfa.HasNext(dfa.start())) {
    return absl::InvalidArgumentError("the pattern matches only the empty text");
  }
  auto grammar = std::make_shared<Grammar>();
  grammar->nodes.emplace_back();  // kAnyNode
  SchemaNode& node = grammar->nodes.emplace_back();
  node.types = kStringType;
  node.pattern = 0;
  grammar->patterns.push_back(std::move(dfa));
  grammar->root = 1;
  grammar->bare = true;
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

absl::StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(std::string_view schema_json,
                                                                 std::string_view prefix,
                                                                 std::string_view suffix) {
  if (schema_json.size() > kMaxSchemaBytes) {
    return absl::InvalidArgumentError(
        StrCat("schema: ", schema_json.size(), " bytes; at most ", kMaxSchemaBytes));
  }
  if (prefix.size() > kMaxAffixBytes || suffix.size() > kMaxAffixBytes) {
    return absl::InvalidArgumentError(
        StrCat("the text around the value: at most ", kMaxAffixBytes, " bytes each side"));
  }
  const json root = json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("schema: not valid JSON");
  return Compiler(root, prefix, suffix).Run();
}

}  // namespace exa::engine::structured
