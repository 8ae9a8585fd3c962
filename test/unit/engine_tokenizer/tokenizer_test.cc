// Behaviour of the tokenizer on small hand-built tokenizer.json files: byte-level encoding with
// and without the GPT-2 regex, both merges formats, added-token rules, errors that name the JSON
// path, invalid UTF-8 input, and concurrent use.
#include <catch2/catch.hpp>

#include <thread>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "support/temp_dir.h"
#include "tiny_tokenizers.h"

namespace exa::engine {
namespace {

using Json = nlohmann::json;
using testing::AddedTokenJson;
using testing::ByteLevelTokenizer;

std::unique_ptr<Tokenizer> Load(const Json& json) {
  auto tokenizer = Tokenizer::FromJson(json.dump(), "tiny.json");
  INFO(tokenizer.status().ToString());
  REQUIRE(tokenizer.ok());
  return std::move(*tokenizer);
}

std::string LoadError(const std::string& text) {
  auto tokenizer = Tokenizer::FromJson(text, "bad.json");
  REQUIRE_FALSE(tokenizer.ok());
  CHECK(tokenizer.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(tokenizer.status().message());
}

// Merges "h e", "he l", "hel l", "hell o" spell "hello"; "o Ġ" would glue a word to the next
// space, which the GPT-2 regex split forbids.
const std::vector<std::pair<std::string, std::string>> kHelloMerges = {
    {"h", "e"}, {"he", "l"}, {"hel", "l"}, {"hell", "o"}, {"o", "Ġ"}, {"Ġ", "w"}};

TEST_CASE("a minimal GPT-2-style byte-level tokenizer.json loads and encodes by merge rank") {
  auto tokenizer = Load(ByteLevelTokenizer(kHelloMerges, /*use_regex=*/true));
  // hello -> id of "hello" (259); " w" -> "Ġw" (262 after "oĠ" 260... see vocab order); "orld"
  // stays bytes.
  const auto ids = tokenizer->Encode("hello world", false);
  const int32_t hello = *tokenizer->TokenToId("hello");
  const int32_t space_w = *tokenizer->TokenToId("Ġw");
  CHECK(ids == std::vector<int32_t>{hello, space_w, 'o', 'r', 'l', 'd'});
  CHECK(tokenizer->Decode(ids, false) == "hello world");
  CHECK(tokenizer->vocab_size() == 256 + 6);
}

TEST_CASE("without use_regex, merges may cross the word boundary the GPT-2 regex would cut") {
  auto tokenizer = Load(ByteLevelTokenizer(kHelloMerges, /*use_regex=*/false));
  const auto ids = tokenizer->Encode("hello world", false);
  // "hello" is still merged first (rank 3 < rank 4), so "oĠ" cannot apply; but "o world" can.
  CHECK(ids.front() == *tokenizer->TokenToId("hello"));
  const auto glued = tokenizer->Encode("o world", false);
  CHECK(glued.front() == *tokenizer->TokenToId("oĠ"));
  auto with_regex = Load(ByteLevelTokenizer(kHelloMerges, /*use_regex=*/true));
  CHECK(with_regex->Encode("o world", false).front() == 'o');
}

TEST_CASE("merges as \"a b\" strings and as [a, b] pairs give the same ids") {
  auto pairs = Load(ByteLevelTokenizer(kHelloMerges, true, /*pairs_format=*/true));
  auto strings = Load(ByteLevelTokenizer(kHelloMerges, true, /*pairs_format=*/false));
  for (const char* text : {"hello world", "hellohello", "  w w", "héllo 😀"}) {
    CHECK(pairs->Encode(text, false) == strings->Encode(text, false));
  }
}

TEST_CASE("every byte string round-trips through a byte-level tokenizer") {
  auto tokenizer = Load(ByteLevelTokenizer(kHelloMerges, true));
  for (const char* text :
       {"", " ", "\t\n", "日本語", "👨‍👩‍👧‍👦", "a  b   c", "x\r\n"}) {
    CHECK(tokenizer->Decode(tokenizer->Encode(text, true), false) == text);
  }
}

TEST_CASE("added tokens are cut out before pre-tokenization and honour lstrip and rstrip") {
  Json json = ByteLevelTokenizer(kHelloMerges, true);
  json["added_tokens"].push_back(AddedTokenJson("<|end|>", 300, true));
  Json stripped = AddedTokenJson("[MASK]", 301, false);
  stripped["lstrip"] = true;
  stripped["rstrip"] = true;
  json["added_tokens"].push_back(stripped);
  auto tokenizer = Load(json);
  const int32_t hello = *tokenizer->TokenToId("hello");
  CHECK(tokenizer->Encode("hello<|end|>", false) == std::vector<int32_t>{hello, 300});
  // The spaces around [MASK] belong to it.
  CHECK(tokenizer->Encode("hello  [MASK]  hello", false) ==
        std::vector<int32_t>{hello, 301, hello});
  CHECK(tokenizer->IsSpecial(300));
  CHECK_FALSE(tokenizer->IsSpecial(301));
  CHECK(tokenizer->Decode(std::vector<int32_t>{hello, 300}, true) == "hello");
  CHECK(tokenizer->Decode(std::vector<int32_t>{hello, 300}, false) == "hello<|end|>");
  CHECK(tokenizer->vocab_size() == 302);
}

TEST_CASE("a single_word added token only matches as a whole word") {
  Json json = ByteLevelTokenizer(kHelloMerges, true);
  Json word = AddedTokenJson("cat", 300, false);
  word["single_word"] = true;
  json["added_tokens"].push_back(word);
  auto tokenizer = Load(json);
  CHECK(tokenizer->Encode("a cat", false) ==
        std::vector<int32_t>{'a', *tokenizer->TokenToId("Ġ"), 300});
  const auto inside = tokenizer->Encode("concatenate", false);
  CHECK(std::find(inside.begin(), inside.end(), 300) == inside.end());
}

TEST_CASE("invalid UTF-8 input encodes as if each bad sequence were U+FFFD") {
  auto tokenizer = Load(ByteLevelTokenizer(kHelloMerges, true));
  const std::string bad = "hi\xF0\x9F\x98 there\xFF";
  CHECK(tokenizer->Encode(bad, false) == tokenizer->Encode(utf8::Lossy(bad), false));
  CHECK(utf8::IsValid(tokenizer->Decode(tokenizer->Encode(bad, false), false)));
}

TEST_CASE("Decode skips ids outside the vocabulary, as Hugging Face does") {
  auto tokenizer = Load(ByteLevelTokenizer(kHelloMerges, true));
  CHECK(tokenizer->Decode(std::vector<int32_t>{'a', -1, 999999, 'b'}, false) == "ab");
}

TEST_CASE("concurrent Encode calls give the same ids as one thread") {
  auto tokenizer = Load(ByteLevelTokenizer(kHelloMerges, true));
  const std::vector<std::string> texts = {"hello world", "hello hello", "héllo wörld 😀", "w w w"};
  std::vector<std::vector<int32_t>> want;
  for (const auto& text : texts) want.push_back(tokenizer->Encode(text, false));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 200; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (tokenizer->Encode(texts[i], false) != want[i]) ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(mismatches == 0);
}

TEST_CASE("an unsupported model names the file, the field and the value") {
  Json json = ByteLevelTokenizer({}, true);
  json["model"]["type"] = "WordPiece";
  const std::string message = LoadError(json.dump());
  CHECK_THAT(message, Catch::Contains("bad.json: model.type \"WordPiece\": unsupported model"));
}

TEST_CASE("an unsupported component inside a Sequence is reported with its index path") {
  Json json = ByteLevelTokenizer({}, true);
  json["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", {json["pre_tokenizer"], {{"type", "BertPreTokenizer"}}}}};
  CHECK_THAT(LoadError(json.dump()),
             Catch::Contains("pre_tokenizer.pretokenizers[1].type \"BertPreTokenizer\""));
  json["pre_tokenizer"] = nullptr;
  json["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  CHECK_THAT(LoadError(json.dump()), Catch::Contains("normalizer.type \"Precompiled\""));
  json["normalizer"] = nullptr;
  json["decoder"] = {{"type", "WordPiece"}};
  CHECK_THAT(LoadError(json.dump()), Catch::Contains("decoder.type \"WordPiece\""));
}

TEST_CASE("bad vocabularies, merges and regexes are errors that name the field") {
  Json json = ByteLevelTokenizer({{"h", "e"}}, true);
  Json bad = json;
  bad["model"]["merges"][0] = {"h", "zz"};
  CHECK_THAT(LoadError(bad.dump()), Catch::Contains("model.merges[0] \"zz\": merge token is not"));
  bad = json;
  bad["model"]["merges"][0] = "h e x";
  CHECK_THAT(LoadError(bad.dump()), Catch::Contains("model.merges[0] \"h e x\""));
  bad = json;
  bad["model"]["vocab"]["h"] = -3;
  CHECK_THAT(LoadError(bad.dump()), Catch::Contains("model.vocab.\"h\" -3: expected an integer"));
  bad = json;
  bad["model"]["vocab"]["h"] = 1e12;
  CHECK_THAT(LoadError(bad.dump()), Catch::Contains("model.vocab.\"h\""));
  bad = json;
  bad["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"Regex", "(unclosed"}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
  CHECK_THAT(LoadError(bad.dump()), Catch::Contains("pre_tokenizer.pattern.Regex: regex"));
  bad = json;
  bad["added_tokens"].push_back({{"content", "x"}});
  CHECK_THAT(LoadError(bad.dump()), Catch::Contains("added_tokens[0].id: required field"));
  bad = json;
  bad["model"]["dropout"] = 0.1;
  CHECK_THAT(LoadError(bad.dump()), Catch::Contains("model.dropout 0.1"));
}

TEST_CASE("malformed and hostile JSON is an error, never a crash") {
  CHECK_THAT(LoadError(""), Catch::Contains("not valid JSON"));
  CHECK_THAT(LoadError("{\"model\": "), Catch::Contains("not valid JSON"));
  CHECK_THAT(LoadError("[1, 2]"), Catch::Contains("expected an object"));
  CHECK_THAT(LoadError("{}"), Catch::Contains("model: required field is missing"));
  CHECK_THAT(LoadError(std::string(100000, '[')), Catch::Contains("nested more than"));
  CHECK_THAT(LoadError("{\"version\": \"2.0\", \"model\": {}}"),
             Catch::Contains("version \"2.0\""));
  CHECK_THAT(LoadError("{\"model\": {\"type\": 7}}"), Catch::Contains("model.type 7"));
}

TEST_CASE("FromFile names the path when the file is missing") {
  auto tokenizer = Tokenizer::FromFile("/nonexistent/tokenizer.json");
  REQUIRE_FALSE(tokenizer.ok());
  CHECK_THAT(std::string(tokenizer.status().message()),
             Catch::Contains("/nonexistent/tokenizer.json"));
}

TEST_CASE("FromFile given a directory says which file it wants") {
  exa::testing::TempDir dir;
  auto tokenizer = Tokenizer::FromFile(dir.path.string());
  REQUIRE_FALSE(tokenizer.ok());
  CHECK(absl::IsInvalidArgument(tokenizer.status()));
  CHECK_THAT(std::string(tokenizer.status().message()),
             Catch::Contains("is a directory; give the tokenizer file, e.g. " +
                             (dir.path / "tokenizer.json").string()));
}

}  // namespace
}  // namespace exa::engine
