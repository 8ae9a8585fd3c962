// Structured outputs: schemas compile or are refused naming the keyword; the matcher takes
// exactly the JSON a schema allows (hand-written cases, and random walks whose every complete
// output must parse and match); the vocabulary mask over real tokenizers only ever lets through
// tokens that continue the output.
#include <catch2/catch.hpp>

#include <chrono>
#include <random>
#include <string>

#include "engine/structured/json_constraint.h"
#include "engine/structured/json_matcher.h"
#include "engine/structured/json_schema.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "test_tokenizers.h"

namespace exa::engine::structured {
namespace {

using json = nlohmann::json;

std::shared_ptr<const Grammar> Compile(const std::string& schema) {
  auto g = CompileJsonSchema(schema);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  return *g;
}

// Whether the whole of `text` is a complete value under `schema`.
bool Matches(const std::string& schema, const std::string& text) {
  JsonMatcher m(Compile(schema));
  return m.Advance(text) && m.Complete();
}

// Whether `text` can begin a value under `schema`.
bool Prefix(const std::string& schema, const std::string& text) {
  JsonMatcher m(Compile(schema));
  return m.Advance(text);
}

const char* const kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer"},
    "email": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 2},
    "pet": {"$ref": "#/$defs/Pet"}
  },
  "required": ["name", "age"],
  "$defs": {"Pet": {"type": "object", "properties": {"kind": {"const": "cat"}},
                    "required": ["kind"]}}
})";

TEST_CASE("schemas outside the supported subset are refused naming the keyword") {
  auto error = [](const std::string& schema) {
    auto g = CompileJsonSchema(schema);
    REQUIRE_FALSE(g.ok());
    return std::string(g.status().message());
  };
  CHECK(error(R"({"type":"object","properties":{"age":{"type":"integer","multipleOf":2}}})") ==
        "schema.properties.age.multipleOf: not supported; supported: type, nullable, enum, const, "
        "anyOf, oneOf, allOf (one member), $ref, $defs, definitions, properties, required, "
        "additionalProperties, items, prefixItems, minItems, maxItems, minLength, maxLength, "
        "pattern, minimum, maximum, exclusiveMinimum, exclusiveMaximum");
  CHECK(error(R"({"type":"integer","minimum":"0"})") == "schema.minimum: a number, not \"0\"");
  CHECK(error(R"({"type":"integer","minimum":0.2,"maximum":0.8})")
            .starts_with("schema: no integer within minimum, maximum"));
  CHECK(error(R"({"type":"number","minimum":3,"exclusiveMaximum":3})")
            .starts_with("schema: no number within"));
  CHECK(error(R"({"type":"strin"})").starts_with("schema.type: \"strin\" is not a type"));
  CHECK(error(R"({"$ref":"#/$defs/Nope"})") ==
        "schema.$ref: \"#/$defs/Nope\" names nothing in the schema");
  CHECK(error(R"({"properties":{"a":{}},"required":["b"]})") ==
        "schema.required: \"b\" is not one of the object's properties");
  CHECK(error(R"({"type":"array","minItems":3,"maxItems":2})") ==
        "schema.minItems: more than maxItems");
  CHECK(error("{") == "schema: not valid JSON");
  CHECK(error("false") == "schema: the schema false matches nothing");
  CHECK(error(R"({"allOf":[{},{}]})") == "schema.allOf: only a list of one schema is supported");
  CHECK(error(std::string(kMaxSchemaBytes + 1, ' ')).starts_with("schema: 65537 bytes"));
  // Annotations are fine.
  CHECK(CompileJsonSchema(R"({"title":"T","description":"d","type":"string","format":"email"})")
            .ok());
}

TEST_CASE("json_object: any object, whitespace between tokens, nothing after it") {
  const std::string any(kJsonObjectSchema);
  CHECK(Matches(any, R"({"a": [1, -2.5e+3, "x\u00e9\n", true, null], "b": {"c": {}}})"));
  CHECK(Matches(any, " {\n  \"k\" : \"caf\xC3\xA9\"\n}"));
  CHECK_FALSE(Prefix(any, "[1]"));
  CHECK_FALSE(Prefix(any, R"({"a" 1})"));
  CHECK_FALSE(Prefix(any, R"({"a":01})"));
  CHECK_FALSE(Prefix(any, R"({"a":1,})"));
  CHECK_FALSE(Prefix(any, R"({"a":tru)"
                          "e1"));
  CHECK_FALSE(Prefix(any, "{\"a\":\"\x01\""));        // a raw control character
  CHECK_FALSE(Prefix(any, "{\"a\":\"\xC3\x28\""));    // broken UTF-8
  CHECK_FALSE(Prefix(any, "{\"a\":\"\xED\xA0\x80"));  // an encoded surrogate
  CHECK_FALSE(Prefix(any, R"({"a":"\x"})"));
  CHECK_FALSE(Prefix(any, R"({}x)"));
  CHECK_FALSE(Prefix(any, "{" + std::string(kMaxWhitespaceRun + 1, ' ')));
  JsonMatcher m(Compile(any));
  REQUIRE(m.Advance("{\"a\":1"));
  CHECK_FALSE(m.Complete());
  REQUIRE(m.Advance("}"));
  CHECK(m.Complete());
  CHECK(m.Terminal());
}

TEST_CASE("an object schema: required, known keys once each, typed values") {
  CHECK(Matches(kPerson, R"({"name":"Bo","age":3})"));
  CHECK(Matches(kPerson, R"({"age":-3,"name":"Bo","email":null,"tags":["a",3],)"
                         R"("pet":{"kind":"cat"}})"));
  CHECK_FALSE(Prefix(kPerson, R"({"name":"Bo"})"));        // age is required
  CHECK_FALSE(Prefix(kPerson, R"({"name":"Bo","nick")"));  // no other keys
  CHECK_FALSE(Prefix(kPerson, R"({"name":"Bo","name")"));  // once
  CHECK_FALSE(Prefix(kPerson, R"({"age":3.5)"));           // an integer
  CHECK_FALSE(Prefix(kPerson, R"({"name":"")"));           // minLength 1
  CHECK_FALSE(Prefix(kPerson, R"({"name":"123456789)"));   // maxLength 8
  CHECK(Prefix(kPerson, R"({"name":"12345678")"));
  CHECK_FALSE(Prefix(kPerson, R"({"tags":["c")"));          // enum
  CHECK_FALSE(Prefix(kPerson, R"({"tags":["a","b",3)"));    // maxItems 2
  CHECK_FALSE(Prefix(kPerson, R"({"pet":{"kind":"dog")"));  // const
  CHECK_FALSE(Prefix(kPerson, R"({"email":1)"));            // string or null
}

TEST_CASE("recursive schemas, alternatives and bare values") {
  const std::string tree = R"({"$defs":{"T":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/T"}}},
      "required":["v"]}},"$ref":"#/$defs/T"})";
  CHECK(Matches(tree, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})"));
  CHECK_FALSE(Prefix(tree, R"({"v":1,"kids":[{"kids":[]})"));
  const std::string number = R"({"type":"number"})";
  JsonMatcher m(Compile(number));
  REQUIRE(m.Advance("12"));
  CHECK(m.Complete());
  CHECK_FALSE(m.Terminal());  // more digits may follow
  CHECK(Matches(R"({"enum":["yes","no"]})", R"("no")"));
  CHECK_FALSE(Prefix(R"({"enum":["yes","no"]})", R"("nope)"));
  JsonMatcher b(Compile(R"({"type":"boolean"})"));
  REQUIRE(b.Advance("false"));
  CHECK(b.Terminal());
  // A $ref cycle that consumes nothing refuses every byte instead of looping.
  CHECK_FALSE(
      Prefix(R"({"$defs":{"A":{"anyOf":[{"$ref":"#/$defs/A"}]}},"$ref":"#/$defs/A"})", "1"));
  // Nesting is bounded.
  CHECK(Prefix(std::string(kJsonObjectSchema), "{\"a\":" + std::string(kMaxJsonDepth - 2, '[')));
  CHECK_FALSE(Prefix(std::string(kJsonObjectSchema), "{\"a\":" + std::string(kMaxJsonDepth, '[')));
}

TEST_CASE("text around the value is held byte for byte") {
  auto g = CompileJsonSchema(R"({"type":"object"})", "<tool_call>\n", "\n</tool_call>");
  REQUIRE(g.ok());
  auto follows = [&](const std::string& text) {
    JsonMatcher m(*g);
    return m.Advance(text);
  };
  JsonMatcher m(*g);
  REQUIRE(m.Advance("<tool_call>\n{\"a\": 1}"));
  CHECK_FALSE(m.Complete());
  REQUIRE(m.Advance("\n</tool_call>"));
  CHECK(m.Terminal());
  CHECK_FALSE(follows("{"));                         // the prefix first
  CHECK_FALSE(follows("<tool_call> {"));             // exactly
  CHECK_FALSE(follows("<tool_call>\n{} \n</tool"));  // nothing between the value and the suffix
  CHECK_FALSE(CompileJsonSchema("{}", std::string(kMaxAffixBytes + 1, 'x')).ok());
}

TEST_CASE("a choice is one of the strings, byte for byte, with nothing around it") {
  auto grammar = CompileChoice({"positive", "negative", "neutral", "yes", "yes!"});
  REQUIRE(grammar.ok());
  auto matches = [&](const std::string& text) {
    JsonMatcher m(*grammar);
    return m.Advance(text) && m.Complete();
  };
  for (const char* ok : {"positive", "neutral", "yes", "yes!"}) CHECK(matches(ok));
  for (const char* bad : {"pos", " yes", "yes ", "\"yes\"", "no", "negativ", "yes!!"}) {
    INFO(bad);
    CHECK_FALSE(matches(bad));
  }
  JsonMatcher m(*grammar);
  REQUIRE(m.Advance("ne"));
  CHECK(m.Accepts("g"));
  CHECK(m.Accepts("u"));
  CHECK_FALSE(m.Accepts("x"));
  REQUIRE(m.Advance("utral"));
  CHECK(m.Terminal());  // nothing extends it: the sequence ends here
  JsonMatcher yes(*grammar);
  REQUIRE(yes.Advance("yes"));
  CHECK(yes.Complete());
  CHECK_FALSE(yes.Terminal());  // "yes!" may still come

  auto error = [](const std::vector<std::string>& choices) {
    auto g = CompileChoice(choices);
    REQUIRE_FALSE(g.ok());
    return std::string(g.status().message());
  };
  CHECK(error({}) == "a list of 1 to 64 strings, not 0");
  CHECK(error({"a", ""}) == "choice 1 is empty or begins with whitespace");
  CHECK(error({" a"}) == "choice 0 is empty or begins with whitespace");
  CHECK(error(std::vector<std::string>(65, "a")) == "a list of 1 to 64 strings, not 65");
}

TEST_CASE("tuples: prefixItems by position, then items or nothing") {
  const std::string pair =
      R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})";
  CHECK(Matches(pair, R"([1, "a"])"));
  CHECK(Matches(pair, R"([1])"));  // no minItems: fewer is fine
  CHECK_FALSE(Matches(pair, R"(["a", 1])"));
  CHECK_FALSE(Prefix(pair, R"([1, "a",)"));  // items false: nothing after the prefix
  const std::string pydantic =               // tuple[int, str] as Pydantic writes it
      R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"minItems":2,
          "maxItems":2})";
  CHECK(Matches(pydantic, R"([7,"x"])"));
  CHECK_FALSE(Matches(pydantic, R"([7])"));
  const std::string rest =
      R"({"type":"array","prefixItems":[{"const":"head"}],"items":{"type":"boolean"}})";
  CHECK(Matches(rest, R"(["head", true, false])"));
  CHECK_FALSE(Matches(rest, R"(["head", "head"])"));
  auto refused = CompileJsonSchema(R"({"prefixItems":[{}],"items":false,"minItems":2})");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message() == "schema.minItems: more than maxItems (or items false)");
}

TEST_CASE("numbers under minimum and maximum: every prefix can still end within them") {
  const std::string month = R"({"type":"integer","minimum":1,"maximum":12})";
  for (const char* ok : {"1", "9", "10", "12"}) CHECK(Matches(month, ok));
  for (const char* bad : {"0", "13", "-1", "1.0", "1e1", "100"}) CHECK_FALSE(Matches(month, bad));
  CHECK_FALSE(Prefix(month, "-"));  // no negative number is at least 1
  CHECK_FALSE(Prefix(month, "0"));
  CHECK_FALSE(Prefix(month, "13"));
  JsonMatcher one(Compile(month));
  REQUIRE(one.Advance("1"));
  CHECK(one.Complete());
  CHECK(one.Accepts("2"));
  CHECK_FALSE(one.Accepts("3"));

  const std::string score = R"({"type":"number","minimum":0,"maximum":1})";
  for (const char* ok :
       {"0", "0.5", "1", "1.0", "1.000", "0.999999999999999", "0.000000000000001"}) {
    INFO(ok);
    CHECK(Matches(score, ok));
  }
  for (const char* bad : {"1.5", "1.000000000000001", "-0.5", "-0", "2", "0.1e1", "01"}) {
    INFO(bad);
    CHECK_FALSE(Matches(score, bad));
  }
  CHECK_FALSE(Prefix(score, "0.0000000000000001"));  // past 15 places
  CHECK_FALSE(Prefix(score, "1.1"));

  const std::string open = R"({"type":"number","exclusiveMinimum":-2.5,"exclusiveMaximum":-1})";
  for (const char* ok : {"-2.4", "-1.5", "-2", "-1.00000000000001", "-2.49999999999999"}) {
    INFO(ok);
    CHECK(Matches(open, ok));
  }
  for (const char* bad : {"-2.5", "-1", "-1.0", "0", "-3", "-1.000000000000001"}) {
    INFO(bad);
    CHECK_FALSE(Matches(open, bad));
  }
  CHECK_FALSE(Prefix(open, "-2.6"));
  CHECK_FALSE(Prefix(open, "-0"));
  CHECK_FALSE(Prefix(open, "-25"));
  // OpenAPI 3.0's boolean forms.
  const std::string legacy =
      R"({"type":"integer","minimum":0,"exclusiveMinimum":true,"maximum":3})";
  CHECK_FALSE(Matches(legacy, "0"));
  CHECK(Matches(legacy, "1"));
  CHECK(Matches(legacy, "3"));
  // A bound past what is written: no bound at all on that side.
  CHECK(Matches(R"({"type":"integer","maximum":1e300})", "123456789012345"));
  CHECK(Matches(R"({"type":"integer","maximum":18446744073709551615})", "7"));
  CHECK_FALSE(CompileJsonSchema(R"({"type":"integer","minimum":18446744073709551615})").ok());
  CHECK(Matches(R"({"type":"number","minimum":0.1})", "0.1"));
  CHECK_FALSE(Matches(R"({"type":"number","minimum":0.1})", "0.09999999999999"));
}

// Random bounds, random walks over number bytes: a walk never reaches a prefix it cannot end, and
// every number it ends lies within the bounds as a double.
TEST_CASE("random bounds: no dead ends, and every number ended is within them") {
  const std::vector<std::string> values = {"0",    "1",   "-1",    "12",     "-7.25", "0.5",
                                           "0.01", "100", "-1000", "3.1415", "1e-3",  "250.75"};
  const char* const keys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
  std::mt19937 rng(11);
  int schemas = 0, numbers = 0;
  for (int trial = 0; trial < 400; ++trial) {
    json item = {{"type", rng() % 3 == 0 ? "integer" : "number"}};
    for (const char* key : keys) {
      if (rng() % 2) item[key] = json::parse(values[rng() % values.size()]);
    }
    auto grammar = CompileJsonSchema(json{{"type", "array"}, {"items", item}}.dump());
    if (!grammar.ok()) continue;  // empty bounds are refused when compiled
    ++schemas;
    JsonMatcher m(*grammar);
    std::string out;
    for (int step = 0; step < 300 && !m.Terminal(); ++step) {
      std::string options;
      for (char c : std::string("[]-.0123456789eE, ")) {
        if (m.Accepts(std::string(1, c))) options.push_back(c);
      }
      INFO(item.dump() << " after " << out);
      REQUIRE_FALSE(options.empty());  // every prefix allowed can go on
      char pick = options[rng() % options.size()];
      if (step > 100 && options.find(']') != std::string::npos) pick = ']';
      REQUIRE(m.Advance(std::string(1, pick)));
      out.push_back(pick);
    }
    if (!m.Complete()) continue;
    const json parsed = json::parse(out);
    for (const json& x : parsed) {
      ++numbers;
      INFO(item.dump() << ": " << x.dump() << " in " << out);
      const double v = x.get<double>();
      if (item["type"] == "integer") CHECK(x.is_number_integer());
      if (item.contains("minimum")) CHECK(v >= item["minimum"].get<double>());
      if (item.contains("maximum")) CHECK(v <= item["maximum"].get<double>());
      if (item.contains("exclusiveMinimum")) CHECK(v > item["exclusiveMinimum"].get<double>());
      if (item.contains("exclusiveMaximum")) CHECK(v < item["exclusiveMaximum"].get<double>());
    }
  }
  CHECK(schemas > 150);
  CHECK(numbers > 300);
}

// Checks `v` against kPerson by hand: the oracle for the random walks below.
bool IsPerson(const json& v) {
  if (!v.is_object() || !v.contains("name") || !v.contains("age")) return false;
  for (const auto& [k, x] : v.items()) {
    if (k == "name") {
      if (!x.is_string()) return false;
    } else if (k == "age") {
      if (!x.is_number_integer()) return false;
    } else if (k == "email") {
      if (!x.is_string() && !x.is_null()) return false;
    } else if (k == "tags") {
      if (!x.is_array() || x.size() > 2) return false;
      for (const json& t : x) {
        if (t != "a" && t != "b" && t != 3) return false;
      }
    } else if (k == "pet") {
      if (x != json{{"kind", "cat"}}) return false;
    } else {
      return false;
    }
  }
  return true;
}

TEST_CASE("random walks: every output the matcher calls complete parses and matches") {
  for (const std::string& schema : {std::string(kPerson), std::string(kJsonObjectSchema)}) {
    auto grammar = Compile(schema);
    int complete = 0;
    for (uint32_t seed = 1; seed <= 300; ++seed) {
      std::mt19937 rng(seed);
      JsonMatcher m(grammar);
      std::string out;
      // Bytes a JSON writer uses, weighted towards structure so walks finish.
      const std::string alphabet =
          "{}[]\",: \n0123456789-.eE+abcdefghijklmnopqrstuvwxyz\\/\xC3\xA9";
      for (int step = 0; step < 400 && !m.Terminal(); ++step) {
        std::string options;
        for (char c : alphabet) {
          if (m.Accepts(std::string(1, c))) options.push_back(c);
        }
        if (options.empty()) break;
        // Close what is open once the walk is long.
        char pick = options[rng() % options.size()];
        if (step > 200) {
          for (char c : std::string("\"}]0")) {
            if (options.find(c) != std::string::npos) pick = c;
          }
        }
        REQUIRE(m.Advance(std::string(1, pick)));
        out.push_back(pick);
      }
      if (!m.Complete()) continue;
      ++complete;
      INFO(out);
      const json parsed = json::parse(out, nullptr, false);
      REQUIRE_FALSE(parsed.is_discarded());
      if (schema == kPerson) CHECK(IsPerson(parsed));
      if (schema == kJsonObjectSchema) CHECK(parsed.is_object());
    }
    CHECK(complete > 100);
  }
}

TEST_CASE("an end id is allowed only once the value is whole, whatever its bytes") {
  auto tokenizer = testing::LoadTestTokenizer("qwen3");
  auto trie = std::make_shared<const TokenTrie>(tokenizer->AllTokenBytes());
  const int32_t hash = *tokenizer->TokenToId("#");  // an ordinary token, here an end id
  JsonConstraint c(Compile(std::string(kJsonObjectSchema)), trie, {hash});
  REQUIRE(c.Accept(*tokenizer->TokenToId("{\"")));
  std::vector<float> logits(static_cast<size_t>(trie->vocab_size()) + 5, 1.0f);
  REQUIRE(c.Mask(logits));
  CHECK(std::isinf(logits[static_cast<size_t>(hash)]));  // inside a key: no end
  CHECK(std::isinf(logits.back()));                      // past the vocabulary: never
  CHECK_FALSE(std::isinf(logits[static_cast<size_t>(*tokenizer->TokenToId("a"))]));
  for (const char* t : {"a", "\":", "1", "}"}) REQUIRE(c.Accept(*tokenizer->TokenToId(t)));
  CHECK(c.Terminal());
  JsonConstraint number(Compile(R"({"type":"integer"})"), trie, {hash});
  REQUIRE(number.Accept(*tokenizer->TokenToId("1")));
  std::fill(logits.begin(), logits.end(), 1.0f);
  REQUIRE(number.Mask(logits));
  CHECK(logits[static_cast<size_t>(hash)] == 1.0f);  // whole: the end may come, as it was
}

TEST_CASE("the mask over real vocabularies lets through only tokens that continue the JSON") {
  for (const std::string& name : {std::string("qwen3"), std::string("llama2")}) {
    INFO(name);
    auto tokenizer = testing::LoadTestTokenizer(name);
    auto trie = std::make_shared<const TokenTrie>(tokenizer->AllTokenBytes());
    const int32_t eos = *tokenizer->TokenToId(name == "qwen3" ? "<|im_end|>" : "</s>");
    auto grammar = Compile(kPerson);
    for (uint32_t seed = 1; seed <= 5; ++seed) {
      JsonConstraint constraint(grammar, trie, {eos});
      std::mt19937 rng(seed);
      std::vector<int32_t> ids;
      double slowest_ms = 0;
      for (int step = 0; step < 400; ++step) {
        const auto start = std::chrono::steady_clock::now();
        const std::vector<int32_t> allowed = constraint.Allowed();
        slowest_ms = std::max(slowest_ms, std::chrono::duration<double, std::milli>(
                                              std::chrono::steady_clock::now() - start)
                                              .count());
        REQUIRE_FALSE(allowed.empty());
        // Every allowed token really continues the output.
        for (size_t i = 0; i < allowed.size(); i += 97) {
          if (allowed[i] == eos) continue;
          CHECK(constraint.Accepts(allowed[i]));
        }
        // A model writes little whitespace; a uniform pick from a vocabulary rich in it writes
        // mostly that, so whitespace-only tokens are drawn one time in ten.
        int32_t pick = allowed[rng() % allowed.size()];
        for (int tries = 0; tries < 20 && rng() % 10 != 0; ++tries) {
          if (trie->bytes(pick).find_first_not_of(" \t\r\n") != std::string::npos) break;
          pick = allowed[rng() % allowed.size()];
        }
        if (step > 100) {  // steer to an end: the first of these that may come
          int rank = 6;
          for (int32_t id : allowed) {
            const std::string& b = trie->bytes(id);
            const int r = id == eos   ? 0
                          : b == "\"" ? 1
                          : b == "}"  ? 2
                          : b == "]"  ? 3
                          : b == "0"  ? 4
                          : b == ","  ? 5
                                      : 6;
            if (r < rank) rank = r, pick = id;
          }
        }
        if (pick == eos) break;
        REQUIRE(constraint.Accept(pick));
        ids.push_back(pick);
        if (constraint.Terminal()) break;
      }
      INFO("slowest mask " << slowest_ms << " ms");
      std::string text;
      for (int32_t id : ids) text += trie->bytes(id);
      INFO(text);
      REQUIRE(constraint.Complete());
      const json parsed = json::parse(text, nullptr, false);
      REQUIRE_FALSE(parsed.is_discarded());
      CHECK(IsPerson(parsed));
      // The detokenizer writes the same text (Llama-2's leading ▁ aside).
      std::string decoded = tokenizer->Decode(ids, true);
      CHECK(json::parse(decoded, nullptr, false) == parsed);
    }
  }
}

}  // namespace
}  // namespace exa::engine::structured
