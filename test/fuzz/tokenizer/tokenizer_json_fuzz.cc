// libFuzzer entry for tokenizer.json parsing (docs/testing.md): any byte string either fails to
// load with a Status or loads into a tokenizer whose Encode, Decode and StreamDecoder work on
// arbitrary input. Built with clang -fsanitize=fuzzer it fuzzes; in ctest its seed corpus and
// deterministic mutations of it run through corpus_test.cc.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/tokenizer/stream_decoder.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

void Exercise(const exa::engine::Tokenizer& tokenizer, std::string_view text) {
  const auto ids = tokenizer.Encode(text, /*add_special_tokens=*/true);
  (void)tokenizer.Decode(ids, /*skip_special_tokens=*/false);
  exa::engine::StreamDecoder stream(tokenizer, /*skip_special_tokens=*/true);
  for (int32_t id : ids) (void)stream.Push(id);
  (void)stream.Flush();
  // Ids the model never produced must be harmless too.
  const int32_t strange[] = {-1, 0, tokenizer.vocab_size() - 1, tokenizer.vocab_size(), INT32_MAX};
  (void)tokenizer.Decode(strange, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto tokenizer = exa::engine::Tokenizer::FromJson(bytes, "fuzz.json");
  if (!tokenizer.ok()) return 0;
  for (std::string_view text : {"", " ", "Hello world 123", "<s>héllo</s> ▁x 😀\t\n", "\xF0\x9F"}) {
    Exercise(**tokenizer, text);
  }
  // The input itself as text: hostile bytes through every stage.
  Exercise(**tokenizer, bytes.substr(0, 4096));
  return 0;
}
