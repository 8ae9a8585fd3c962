// The streaming decoder never emits part of a UTF-8 character, and what it emits adds up to the
// full decode, on the real byte-level (Qwen3) and byte-fallback (Llama-2 family) tokenizers.
#include <catch2/catch.hpp>

#include "engine/tokenizer/stream_decoder.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace exa::engine {
namespace {

const Tokenizer& Load(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& slot = loaded[name];
  if (slot == nullptr) {
    auto tokenizer = Tokenizer::FromFile(std::string(EXA_TOKENIZER_TEST_DATA_DIR) + "/" + name +
                                         ".tokenizer.json");
    REQUIRE(tokenizer.ok());
    slot = std::move(*tokenizer);
  }
  return *slot;
}

struct Streamed {
  std::vector<std::string> pieces;
  std::string text;
  int held = 0;  // Pushes that returned "".
};

Streamed StreamAll(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  StreamDecoder stream(tokenizer, /*skip_special_tokens=*/false);
  Streamed out;
  for (int32_t id : ids) {
    out.pieces.push_back(stream.Push(id));
    if (out.pieces.back().empty()) ++out.held;
    out.text += out.pieces.back();
  }
  out.pieces.push_back(stream.Flush());
  out.text += out.pieces.back();
  return out;
}

TEST_CASE("byte-level emoji split over several tokens is held back until complete") {
  const Tokenizer& tokenizer = Load("qwen3");
  const std::string text = "family 👨‍👩‍👧‍👦 and 𠀀𠀁 done";
  const auto ids = tokenizer.Encode(text, false);
  const Streamed streamed = StreamAll(tokenizer, ids);
  CHECK(streamed.text == text);
  CHECK(streamed.held > 0);
  for (const auto& piece : streamed.pieces) CHECK(utf8::IsValid(piece));
}

TEST_CASE("byte-fallback tokens <0xF0><0x9F>... are held back, and spaces survive streaming") {
  const Tokenizer& tokenizer = Load("llama2");
  const std::string text = "Hello 🙂 world 龘靐";
  const auto ids = tokenizer.Encode(text, false);
  const Streamed streamed = StreamAll(tokenizer, ids);
  CHECK(streamed.text == tokenizer.Decode(ids, false));
  CHECK(streamed.text == text);
  CHECK(streamed.held > 0);
  for (const auto& piece : streamed.pieces) CHECK(utf8::IsValid(piece));
}

TEST_CASE("Flush turns bytes of a character that never completed into U+FFFD") {
  const Tokenizer& tokenizer = Load("llama2");
  const int32_t f0 = *tokenizer.TokenToId("<0xF0>");
  const int32_t x9f = *tokenizer.TokenToId("<0x9F>");
  StreamDecoder stream(tokenizer, false);
  CHECK(stream.Push(*tokenizer.TokenToId("▁Hello")) == "Hello");
  CHECK(stream.Push(f0).empty());
  CHECK(stream.Push(x9f).empty());
  const std::string rest = stream.Flush();
  CHECK(utf8::IsValid(rest));
  CHECK(rest == "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("a stream of invalid bytes is released after kMaxHeldIds ids instead of stalling") {
  const Tokenizer& tokenizer = Load("llama2");
  const int32_t f0 = *tokenizer.TokenToId("<0xF0>");
  StreamDecoder stream(tokenizer, false);
  std::string out;
  for (size_t i = 0; i <= StreamDecoder::kMaxHeldIds + 1; ++i) out += stream.Push(f0);
  CHECK_FALSE(out.empty());
  CHECK(utf8::IsValid(out));
}

}  // namespace
}  // namespace exa::engine
