// TokenizeLines, the body of `exaserve-cli tokenize`: JSON strings in, JSON id arrays out (and
// back with decode), stopping at the first bad line with its line number.
#include <catch2/catch.hpp>

#include <sstream>

#include "engine/tokenizer/tokenize_lines.h"
#include "tiny_tokenizers.h"

namespace exa::engine {
namespace {

std::unique_ptr<Tokenizer> Tiny() {
  nlohmann::json json = testing::ByteLevelTokenizer({{"h", "i"}}, true);
  json["added_tokens"].push_back(testing::AddedTokenJson("<|end|>", 300, true));
  auto tokenizer = Tokenizer::FromJson(json.dump(), "tiny.json");
  REQUIRE(tokenizer.ok());
  return std::move(*tokenizer);
}

absl::Status Run(const Tokenizer& tokenizer, const std::string& input, std::string* output,
                 TokenizeLinesOptions options = {}) {
  std::istringstream in(input);
  std::ostringstream out;
  absl::Status status = TokenizeLines(tokenizer, in, out, options);
  *output = out.str();
  return status;
}

TEST_CASE("encode prints one id array per JSON string line, skipping blank lines") {
  auto tokenizer = Tiny();
  std::string out;
  REQUIRE(Run(*tokenizer, "\"hi\"\n\n\"a\\n<|end|>\"\n", &out).ok());
  CHECK(out == "[256]\n[97,10,300]\n");
}

TEST_CASE("decode turns id arrays back into JSON strings, optionally without special tokens") {
  auto tokenizer = Tiny();
  std::string out;
  REQUIRE(Run(*tokenizer, "[256]\n[97,10,300]\n", &out, {.decode = true}).ok());
  CHECK(out == "\"hi\"\n\"a\\n<|end|>\"\n");
  REQUIRE(Run(*tokenizer, "[97,300]\n", &out, {.decode = true, .skip_special_tokens = true}).ok());
  CHECK(out == "\"a\"\n");
}

TEST_CASE("the first bad line stops the run and is named by number") {
  auto tokenizer = Tiny();
  std::string out;
  absl::Status status = Run(*tokenizer, "\"ok\"\n[1, 2]\n\"never\"\n", &out);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(status.message()) == "line 2: [1,2]: expected a JSON string");
  CHECK(out == "[111,107]\n");
  status = Run(*tokenizer, "[1, 400]\n", &out, {.decode = true});
  CHECK_THAT(std::string(status.message()),
             Catch::Contains("line 1: [1] 400: expected an integer"));
  status = Run(*tokenizer, "not json\n", &out);
  CHECK_THAT(std::string(status.message()), Catch::Contains("line 1: not valid JSON"));
}

}  // namespace
}  // namespace exa::engine
