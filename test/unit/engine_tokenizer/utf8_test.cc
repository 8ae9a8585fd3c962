// UTF-8 helpers reproduce Rust's String::from_utf8_lossy (one U+FFFD per maximal invalid
// subpart) and spot an incomplete trailing sequence; the tokenizer's decoded text depends on it.
#include <catch2/catch.hpp>

#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/utf8.h"

namespace exa::engine {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST_CASE("Lossy replaces each maximal invalid subpart with one U+FFFD") {
  CHECK(utf8::Lossy("abc") == "abc");
  CHECK(utf8::Lossy("\xF0\x9F\x98") == kFffd);  // truncated 4-byte sequence
  CHECK(utf8::Lossy("\xF0\x9F\x98"
                    "a") == kFffd + "a");
  CHECK(utf8::Lossy("\xC0\x80") == kFffd + kFffd);              // overlong lead is not a prefix
  CHECK(utf8::Lossy("\xED\xA0\x80") == kFffd + kFffd + kFffd);  // surrogate
  CHECK(utf8::Lossy("a\xFF"
                    "b") == "a" + kFffd + "b");
  CHECK(utf8::Lossy("\xE2\x82") == kFffd);
  CHECK(utf8::Lossy("\xF4\x90\x80\x80") == kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
}

TEST_CASE("EndsWithIncompleteSequence holds only a cut-short valid prefix") {
  CHECK(utf8::EndsWithIncompleteSequence("ok\xF0\x9F"));
  CHECK(utf8::EndsWithIncompleteSequence("\xE2"));
  CHECK_FALSE(utf8::EndsWithIncompleteSequence("ok\xF0\x9F\x98\x80"));
  CHECK_FALSE(utf8::EndsWithIncompleteSequence("ok"));
  CHECK_FALSE(utf8::EndsWithIncompleteSequence("\xFF"));
}

TEST_CASE("Oniguruma class escapes are rewritten with Oniguruma's Unicode meaning") {
  CHECK(TranslateOnigurumaPattern(R"(\s+(?!\S))") ==
        R"([\t-\r\x{85}\p{Z}]+(?![^\t-\r\x{85}\p{Z}]))");
  CHECK(TranslateOnigurumaPattern(R"([^\s\p{L}])") == R"([^\t-\r\x{85}\p{Z}\p{L}])");
  CHECK(TranslateOnigurumaPattern(R"(\\s)") == R"(\\s)");
  // U+180E is not White_Space (since Unicode 6.3): Oniguruma's \s, and so ours, skips it.
  auto regex = Regex::Compile(R"(\s)");
  REQUIRE(regex.ok());
  CHECK((*regex)->FindAll("\xE1\xA0\x8E").empty());
  CHECK((*regex)->FindAll("\xE3\x80\x80").size() == 1);  // U+3000 ideographic space
}

TEST_CASE("FindAll skips an empty match right after the previous match, like Oniguruma") {
  auto regex = Regex::Compile("a*");
  REQUIRE(regex.ok());
  const auto matches = (*regex)->FindAll("baab");
  REQUIRE(matches.size() == 3);
  CHECK((matches[0].begin == 0 && matches[0].end == 0));
  CHECK((matches[1].begin == 1 && matches[1].end == 3));
  CHECK((matches[2].begin == 4 && matches[2].end == 4));
}

TEST_CASE("a whitespace run of millions of bytes still splits as Hugging Face's regex does") {
  // Qwen's pattern backtracks over the whole run in `\s*[\r\n]+` before `\s+(?!\S)` matches;
  // a fixed backtracking budget would give up and leave the text unsplit.
  auto regex = Regex::Compile(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
      R"(\s*[\r\n]+|\s+(?!\S)|\s+)");
  REQUIRE(regex.ok());
  const size_t run = 3'000'000;
  const auto matches = (*regex)->FindAll(std::string(run, ' ') + "a");
  REQUIRE(matches.size() == 2);
  CHECK((matches[0].begin == 0 && matches[0].end == run - 1));
  CHECK((matches[1].begin == run - 1 && matches[1].end == run + 1));
}

}  // namespace
}  // namespace exa::engine
