// Regular expressions for structured outputs: the compiled automaton matches exactly what
// std::regex (ECMAScript) matches whole, over hundreds of random patterns; unsupported syntax is
// refused by name; JSON string values under a pattern (and length bounds) never reach a prefix
// they cannot finish, and every string they finish matches; guided_regex's bare text likewise,
// down to the mask over a real vocabulary.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <regex>
#include <string>

#include "engine/structured/json_constraint.h"
#include "engine/structured/json_matcher.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/regex.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "test_tokenizers.h"

namespace exa::engine::structured {
namespace {

using json = nlohmann::json;

ByteDfa Dfa(const std::string& pattern, const RegexOptions& options = {}) {
  auto dfa = CompileRegex(pattern, options);
  INFO(pattern << ": " << dfa.status().ToString());
  REQUIRE(dfa.ok());
  return *std::move(dfa);
}

bool Whole(const ByteDfa& dfa, std::string_view text) {
  int32_t s = dfa.start();
  for (const char c : text) {
    s = dfa.Next(s, static_cast<uint8_t>(c));
    if (s == ByteDfa::kDead) return false;
  }
  return dfa.Accepting(s);
}

std::string Error(const std::string& pattern, const RegexOptions& options = {}) {
  auto dfa = CompileRegex(pattern, options);
  REQUIRE_FALSE(dfa.ok());
  return std::string(dfa.status().message());
}

TEST_CASE("patterns match whole texts: classes, escapes, groups, quantifiers, UTF-8") {
  const ByteDfa phone = Dfa(R"(^\d{3}-\d{4}$)");
  CHECK(Whole(phone, "555-1234"));
  CHECK_FALSE(Whole(phone, "5551234"));
  CHECK_FALSE(Whole(phone, "555-12345"));
  const ByteDfa alt = Dfa("^(?:cat|dog)s?$|^bird$");
  for (const char* ok : {"cat", "dogs", "bird"}) CHECK(Whole(alt, ok));
  for (const char* bad : {"birds", "ca", "cats!", ""}) CHECK_FALSE(Whole(alt, bad));
  const ByteDfa not_a = Dfa("[^a]");
  for (const char* ok : {"b", "é", "€", "😀", "\n"}) CHECK(Whole(not_a, ok));
  CHECK_FALSE(Whole(not_a, "a"));
  CHECK_FALSE(Whole(not_a, "\xC3"));  // half a character
  const ByteDfa dot = Dfa("a.c");
  CHECK(Whole(dot, "abc"));
  CHECK(Whole(dot,
              "a\xE2\x82\xAC"
              "c"));  // a€c
  CHECK_FALSE(Whole(dot, "a\nc"));
  CHECK(Whole(Dfa(R"(\u00e9\uD83D\uDE00\x41\u{1F600})"), "é😀A😀"));
  CHECK(Whole(Dfa("(?<year>[0-9]{4})-[01][0-9]"), "2026-12"));
  CHECK(Whole(Dfa("a{2,3}?b+?"), "aaab"));
  CHECK_FALSE(Whole(Dfa("a{2,3}"), "aaaa"));
  CHECK(Whole(Dfa("a{2,}"), "aaaaaaa"));
  CHECK(Whole(Dfa("x{,3}"), "x{,3}"));  // not a quantifier: a literal brace, as in ECMA-262
  CHECK(Whole(Dfa(R"([\w.+-]+@[\w-]+\.[a-z]{2,})"), "first.last+tag@example.org"));
  CHECK(Whole(Dfa(R"(\s\S\D\W)"), "\t!x?"));
  CHECK(Whole(Dfa(R"([\d-z])"), "-"));
  CHECK(Whole(Dfa(R"(\.\*\/\-)"), ".*/-"));
  CHECK(Whole(Dfa(""), ""));
}

TEST_CASE("unsupported and malformed patterns are refused by name") {
  CHECK(Error(R"((a)\1)") == "at byte 5: backreferences are not supported");
  CHECK(
      Error("(?=a)b").ends_with("lookahead and lookbehind ((?=, (?!, (?<=, (?<!) are not "
                                "supported"));
  CHECK(Error(R"(a\b)").ends_with("word boundaries (\\b, \\B) are not supported"));
  CHECK(Error(R"(\p{L})").ends_with("Unicode property classes (\\p{...}) are not supported"));
  CHECK(Error("a**").ends_with("nothing to repeat (a quantifier after a quantifier)"));
  CHECK(Error("*a") == "at byte 0: nothing to repeat");
  CHECK(Error("(a") == "at byte 2: '(' without a matching ')'");
  CHECK(Error("a)") == "at byte 1: ')' without a matching '('");
  CHECK(Error("[a") == "at byte 2: '[' without a matching ']'");
  CHECK(Error("a{5,2}").ends_with("{n,m} with m less than n"));
  CHECK(Error("a{1001}").ends_with("a repeat count above 1000"));
  CHECK(
      Error("a^b").ends_with("'^' is supported only at the start of the pattern or of an "
                             "alternative"));
  CHECK(
      Error("a$b").ends_with("'$' is supported only at the end of the pattern or of an "
                             "alternative"));
  CHECK(
      Error(R"(\uD800)").ends_with("a lone surrogate (\\uD800 to \\uDFFF) matches no UTF-8 text"));
  CHECK(Error(R"(\q)") == "at byte 2: \\q is not a known escape");
  CHECK(Error("[z-a]").ends_with("a range in a class out of order"));
  CHECK(Error("a\\") == "at byte 2: the pattern ends with a backslash");
  // 2^15 subsets: beyond the automaton's bound, refused when compiled rather than slow.
  CHECK(Error("(a|b)*a(a|b){14}") == "the pattern needs more than 16384 automaton states");
  CHECK(Error(std::string(kMaxPatternBytes + 1, 'a')) == "4097 bytes; at most 4096");
  CHECK(Error("[]") == "no text matches the pattern");  // the empty class, as in ECMA-262
  CHECK(Error("[]a]") == "no text matches the pattern");
}

TEST_CASE("any text as a pattern compiles or is refused, never crashes or runs away") {
  std::mt19937 rng(3);
  const std::string alphabet = "ab()[]{}|*+?.^$\\-,0123dswbuxcpk<>=!:\xC3\xA9";
  int compiled = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string p;
    for (size_t n = rng() % 14; n > 0; --n) p.push_back(alphabet[rng() % alphabet.size()]);
    auto dfa = CompileRegex(p, {.json_string = trial % 2 == 0, .max_length = 1 + trial % 9});
    if (!dfa.ok()) {
      CHECK_FALSE(dfa.status().message().empty());
      continue;
    }
    ++compiled;
    REQUIRE(dfa->start() >= 0);
    REQUIRE(dfa->start() < dfa->states());
  }
  CHECK(compiled > 1000);
  CHECK(Error("(.*a){200}") ==
        "the pattern is too complex: its automaton takes more than 4000000 steps to build");
}

TEST_CASE("length bounds fold into the automaton, and JSON strings drop unwritable bytes") {
  const ByteDfa word = Dfa("[a-zé]+", {.min_length = 2, .max_length = 3});
  CHECK_FALSE(Whole(word, "a"));
  CHECK(Whole(word, "ab"));
  CHECK(Whole(word, "éé"));  // characters, not bytes
  CHECK(Whole(word, "abé"));
  CHECK_FALSE(Whole(word, "abcd"));
  const ByteDfa pairs = Dfa("(ab)+", {.max_length = 3});
  CHECK(Whole(pairs, "ab"));
  CHECK_FALSE(Whole(pairs, "abab"));
  // From every state some text still ends it: "a" then "b" was the only way on.
  CHECK(pairs.Next(pairs.Next(pairs.start(), 'a'), 'b') != ByteDfa::kDead);
  CHECK(pairs.Next(pairs.Next(pairs.Next(pairs.start(), 'a'), 'b'), 'a') == ByteDfa::kDead);
  CHECK(Error("(ab)+", {.min_length = 3, .max_length = 3}) ==
        "no text matches the pattern within its length bounds");
  CHECK(Error("a{3}", {.max_length = 2}) == "no text matches the pattern within its length bounds");
  CHECK(Error(R"(\x01)", {.json_string = true}) ==
        "no text matches the pattern that a JSON string can hold");
  const ByteDfa controls = Dfa(R"([\x00-\x1f])", {.json_string = true});
  CHECK(Whole(controls, "\n"));
  CHECK_FALSE(Whole(controls, "\x01"));
  CHECK(Error(".*", {.min_length = 5000}) ==
        "the pattern with its length bounds needs more than 16384 automaton states");
}

// A random pattern over a small alphabet, in the syntax both engines read alike.
std::string RandomPattern(std::mt19937& rng, int depth) {
  const int pick = static_cast<int>(rng() % (depth > 3 ? 6 : 11));
  static const char* const kAtoms[] = {"a", "b", "1", "[ab]", "[^a]", ".", "\\d", "[a-b1]", "\\s"};
  switch (pick) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
    case 5:
      return kAtoms[rng() % std::size(kAtoms)];
    case 6:
      return RandomPattern(rng, depth + 1) + RandomPattern(rng, depth + 1);
    case 7:
      return "(" + RandomPattern(rng, depth + 1) + "|" + RandomPattern(rng, depth + 1) + ")";
    case 8: {
      static const char* const kQuantifiers[] = {"*",     "+",     "?",    "{2}",
                                                 "{1,2}", "{0,3}", "{2,}", "*?"};
      return "(?:" + RandomPattern(rng, depth + 1) + ")" +
             kQuantifiers[rng() % std::size(kQuantifiers)];
    }
    default:
      return RandomPattern(rng, depth + 1) + RandomPattern(rng, depth + 1) +
             RandomPattern(rng, depth + 1);
  }
}

TEST_CASE("random patterns: the automaton matches what std::regex matches, text for text") {
  std::mt19937 rng(5);
  const std::string alphabet = "ab1 \n";
  int checked = 0, matched = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const std::string pattern = RandomPattern(rng, 0);
    auto dfa = CompileRegex(pattern);
    if (!dfa.ok()) {
      INFO(pattern << ": " << dfa.status().ToString());
      CHECK(dfa.status().message().find("automaton states") != std::string_view::npos);
      continue;
    }
    const std::regex oracle(pattern, std::regex::ECMAScript);
    // Every text over the alphabet up to 5 characters.
    std::vector<std::string> texts = {""};
    for (size_t from = 0, len = 0; len < 5; ++len) {
      const size_t to = texts.size();
      for (size_t i = from; i < to; ++i) {
        for (char c : alphabet) texts.push_back(texts[i] + c);
      }
      from = to;
    }
    for (const std::string& t : texts) {
      INFO(pattern << " on \"" << t << "\"");
      const bool expected = std::regex_match(t, oracle);
      CHECK(Whole(*dfa, t) == expected);
      ++checked;
      matched += expected ? 1 : 0;
    }
  }
  CHECK(checked > 100000);
  CHECK(matched > 1000);
}

TEST_CASE("a JSON string under a pattern: escapes decoded, no dead ends, every end matches") {
  auto grammar = CompileJsonSchema(R"({"type":"string","pattern":"^[A-Z]{2}\\d$"})");
  REQUIRE(grammar.ok());
  auto matches = [&](const std::string& text) {
    JsonMatcher m(*grammar);
    return m.Advance(text) && m.Complete();
  };
  CHECK(matches(R"("AB1")"));
  CHECK_FALSE(matches(R"("AB")"));
  CHECK_FALSE(matches(R"("ab1")"));
  JsonMatcher m(*grammar);
  REQUIRE(m.Advance("\"A"));
  CHECK_FALSE(m.Accepts("1"));
  CHECK_FALSE(m.Accepts("\\"));      // no escape gives a capital letter
  CHECK(m.PlainStringRoom() == -1);  // so the mask walks these bytes one by one
  // Where plain text leaves the automaton as it is, the mask may take plain tokens whole.
  for (const char* loose : {"[^\\n]*", "[^\"]*", "a[\\s\\S]*"}) {
    auto g = CompileJsonSchema(json{{"type", "string"}, {"pattern", loose}}.dump());
    REQUIRE(g.ok());
    JsonMatcher p(*g);
    INFO(loose);
    REQUIRE(p.Advance("\"a"));
    CHECK(p.PlainStringRoom() == std::numeric_limits<int64_t>::max());
    REQUIRE(p.Advance("é\\/"));
    CHECK(p.PlainStringRoom() == std::numeric_limits<int64_t>::max());
  }
  // "." refuses U+2028 and U+2029, which are plain text: ".*" is walked byte by byte.
  auto dot = CompileJsonSchema(R"({"type":"string","pattern":".*"})");
  REQUIRE(dot.ok());
  JsonMatcher d(*dot);
  REQUIRE(d.Advance("\"a"));
  CHECK(d.PlainStringRoom() == -1);
  CHECK_FALSE(d.Accepts("\u2028"));
  auto counted = CompileJsonSchema(R"({"type":"string","pattern":".*","maxLength":5})");
  REQUIRE(counted.ok());
  JsonMatcher c(*counted);
  REQUIRE(c.Advance("\"a"));
  CHECK(c.PlainStringRoom() == -1);  // each character moves the count

  auto quoted = CompileJsonSchema(R"({"type":"string","pattern":"^\"[a-z]+\"\n$"})");
  REQUIRE(quoted.ok());
  JsonMatcher q(*quoted);
  CHECK(q.Advance(R"("\"ok\"\n")"));
  CHECK(q.Complete());
  JsonMatcher u(*quoted);
  CHECK_FALSE(u.Advance(R"("\u0022)"));  // the same character, but no \u escapes here
  auto error = [](const std::string& schema) {
    auto g = CompileJsonSchema(schema);
    REQUIRE_FALSE(g.ok());
    return std::string(g.status().message());
  };
  CHECK(error(R"({"properties":{"id":{"type":"string","pattern":"(a)\\1"}}})") ==
        "schema.properties.id.pattern: at byte 5: backreferences are not supported");
  CHECK(error(R"({"type":"string","pattern":"a{4}","maxLength":3})") ==
        "schema.pattern: no text matches the pattern within its length bounds that a JSON string "
        "can hold");
  CHECK(error(R"({"type":"string","pattern":3})") ==
        "schema.pattern: a regular expression as a string, not 3");
  // Only strings: an integer ignores it.
  CHECK(CompileJsonSchema(R"({"type":"integer","pattern":"a"})").ok());
}

// UTF-8 to code points, so that std::wregex's `.` and classes take a character as ours do.
std::wstring Wide(const std::string& utf8) {
  std::wstring out;
  for (size_t i = 0; i < utf8.size();) {
    const auto b = static_cast<uint8_t>(utf8[i]);
    const int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(utf8[i + k]) & 0x3F);
    out.push_back(static_cast<wchar_t>(cp));
    i += static_cast<size_t>(len);
  }
  return out;
}

TEST_CASE("string formats that a pattern can hold are held; others stay annotations") {
  auto matches = [](const std::string& format, const std::string& value) {
    auto grammar = CompileJsonSchema(json{{"type", "string"}, {"format", format}}.dump());
    INFO(format << ": " << grammar.status().ToString());
    REQUIRE(grammar.ok());
    JsonMatcher m(*grammar);
    return m.Advance(json(value).dump()) && m.Complete();
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> good = {
      {"date", {"2026-12-05", "1999-02-28"}},
      {"time", {"13:05:59Z", "23:59:60.5+01:00", "00:00:00-12:30"}},
      {"date-time", {"2026-12-05T13:05:59Z", "2026-12-05T13:05:59.123456789+05:30"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000", "ABCDEF01-2345-6789-abcd-ef0123456789"}},
      {"ipv4", {"192.168.0.1", "255.255.255.255", "0.0.0.0"}},
      {"hostname", {"example", "a-b.example.org", "x1.y2"}},
      {"email", {"first.last+tag@example.org", "a@b.co"}},
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> bad = {
      {"date", {"2026-13-05", "2026-12-32", "26-12-05", "2026-12-05T"}},
      {"time", {"24:00:00Z", "13:05:59", "13:5:59Z"}},
      {"date-time", {"2026-12-05 13:05:59Z", "2026-12-05T13:05Z"}},
      {"uuid", {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"}},
      {"ipv4", {"256.1.1.1", "1.2.3", "01.2.3.4"}},
      {"hostname", {"-a.example", "a..b", "a_b"}},
      {"email", {"no-at.example", "a@b", "a@-b.org", ".a@b.org"}},
  };
  for (const auto& [format, values] : good) {
    for (const std::string& v : values) CHECK(matches(format, v));
  }
  for (const auto& [format, values] : bad) {
    for (const std::string& v : values) CHECK_FALSE(matches(format, v));
  }
  // Other formats, and a format beside a pattern, constrain nothing more.
  CHECK(matches("ipv6", "anything at all"));
  CHECK(matches("uri", "not a uri"));
  auto both = CompileJsonSchema(R"({"type":"string","format":"date","pattern":"x+"})");
  REQUIRE(both.ok());
  JsonMatcher m(*both);
  CHECK((m.Advance(R"("xx")") && m.Complete()));
  // A format with length bounds: both hold, or the schema is refused.
  CHECK(
      CompileJsonSchema(R"({"type":"string","format":"date","maxLength":8})").status().message() ==
      "schema.format: no text matches the pattern within its length bounds that a JSON string "
      "can hold");
}

TEST_CASE("random patterns in JSON strings: random walks end in strings std::regex matches") {
  std::mt19937 rng(7);
  const std::vector<std::string> pieces = {"a",    "b",       "1", " ",  "\\n", "\\\"",
                                           "\\\\", "\\u0061", "é", "\"", "\\t"};
  int ended = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const std::string pattern = RandomPattern(rng, 0);
    json schema = {{"type", "string"}, {"pattern", pattern}};
    if (rng() % 3 == 0) schema["maxLength"] = rng() % 6;
    if (rng() % 3 == 0) schema["minLength"] = rng() % 3;
    auto grammar = CompileJsonSchema(schema.dump());
    if (!grammar.ok()) continue;  // too many states, or nothing within the bounds
    JsonMatcher m(*grammar);
    REQUIRE(m.Advance("\""));
    std::string out = "\"";
    for (int step = 0; step < 40 && !m.Terminal(); ++step) {
      std::vector<std::string> options;
      for (const std::string& p : pieces) {
        if (m.Accepts(p)) options.push_back(p);
      }
      INFO(schema.dump() << " after " << out);
      REQUIRE_FALSE(options.empty());  // every prefix allowed can go on
      std::string pick = options[rng() % options.size()];
      if (step > 12 && std::find(options.begin(), options.end(), "\"") != options.end()) {
        pick = "\"";
      }
      REQUIRE(m.Advance(pick));
      out += pick;
    }
    if (!m.Complete()) continue;
    ++ended;
    const std::string value = json::parse(out).get<std::string>();
    INFO(schema.dump() << ": " << out);
    CHECK(std::regex_match(Wide(value), std::wregex(Wide(pattern), std::regex::ECMAScript)));
    const auto chars = static_cast<size_t>(std::count_if(value.begin(), value.end(), [](char c) {
      return (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    }));
    if (schema.contains("maxLength")) CHECK(chars <= schema["maxLength"].get<size_t>());
    if (schema.contains("minLength")) CHECK(chars >= schema["minLength"].get<size_t>());
  }
  CHECK(ended > 100);
}

TEST_CASE("guided_regex: bare text the pattern matches, ending once nothing can follow") {
  auto grammar = CompileRegexGrammar("(yes|no)[.!]?");
  REQUIRE(grammar.ok());
  JsonMatcher m(*grammar);
  CHECK_FALSE(m.Complete());
  CHECK_FALSE(m.Accepts(" "));
  CHECK_FALSE(m.Accepts("\"yes"));
  REQUIRE(m.Advance("yes"));
  CHECK(m.Complete());
  CHECK_FALSE(m.Terminal());
  REQUIRE(m.Advance("!"));
  CHECK(m.Terminal());
  CHECK_FALSE(m.Accepts("!"));
  CHECK(CompileRegexGrammar("").status().message() == "the pattern matches only the empty text");
  CHECK(CompileRegexGrammar("(").status().message() == "at byte 1: '(' without a matching ')'");
}

// A random walk through the mask: each step every 7th allowed token is re-checked and one is
// taken (seldom whitespace, as a model writes); after 40 steps the first allowed of `enders`
// (the end id first) ends it. Returns the text, once the constraint calls it complete.
std::string WalkMask(const std::shared_ptr<const Grammar>& grammar,
                     const std::shared_ptr<const TokenTrie>& trie, int32_t eos, uint32_t seed,
                     const std::vector<std::string>& enders) {
  JsonConstraint constraint(grammar, trie, {eos});
  std::mt19937 rng(seed);
  std::string text;
  for (int step = 0; step < 200 && !constraint.Terminal(); ++step) {
    const std::vector<int32_t> allowed = constraint.Allowed();
    INFO(text);
    REQUIRE_FALSE(allowed.empty());
    for (size_t i = 0; i < allowed.size(); i += 7) {
      if (allowed[i] != eos) CHECK(constraint.Accepts(allowed[i]));
    }
    int32_t pick = allowed[rng() % allowed.size()];
    for (int tries = 0; tries < 20 && step > 2; ++tries) {
      if (trie->bytes(pick).find_first_not_of(" \t\r\n") != std::string::npos) break;
      pick = allowed[rng() % allowed.size()];
    }
    if (step > 40) {
      size_t rank = enders.size() + 1;
      for (int32_t id : allowed) {
        const auto e = std::find(enders.begin(), enders.end(), trie->bytes(id));
        const size_t r = id == eos           ? 0
                         : e == enders.end() ? enders.size() + 1
                                             : 1 + (e - enders.begin());
        if (r < rank) rank = r, pick = id;
      }
    }
    if (pick == eos) break;
    REQUIRE(constraint.Accept(pick));
    text += trie->bytes(pick);
  }
  INFO(text);
  REQUIRE(constraint.Complete());
  return text;
}

TEST_CASE("the mask under a pattern lets through only tokens that keep the text matchable") {
  auto tokenizer = testing::LoadTestTokenizer("qwen3");
  auto trie = std::make_shared<const TokenTrie>(tokenizer->AllTokenBytes());
  const int32_t eos = *tokenizer->TokenToId("<|im_end|>");
  const std::string pattern = R"(\d{4}-\d{2}-\d{2}( [A-Z][a-z]+)?)";
  auto in_json = CompileJsonSchema(json{
      {"type", "object"},
      {"properties", {{"when", {{"type", "string"}, {"pattern", pattern}}}}},
      {"required", {"when"}}}.dump());
  REQUIRE(in_json.ok());
  const std::string sentence = R"((yes|no), because [a-z ,]{1,60}\.)";
  auto bare = CompileRegexGrammar(sentence);
  REQUIRE(bare.ok());
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const json parsed = json::parse(WalkMask(*in_json, trie, eos, seed, {"\"", "}"}));
    CHECK(std::regex_match(parsed["when"].get<std::string>(), std::regex(pattern)));
    const std::string text = WalkMask(*bare, trie, eos, seed, {"."});
    CHECK(std::regex_match(text, std::regex(sentence)));
  }
}

}  // namespace
}  // namespace exa::engine::structured
