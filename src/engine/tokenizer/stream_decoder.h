// Incremental detokenization for streaming: feed generated ids one at a time and get the text
// they add. The concatenation of all Push results and the final Flush equals
// Tokenizer::Decode(all ids). A piece is never cut inside a UTF-8 character: when the text so far
// ends in an incomplete byte sequence (an emoji split over byte-fallback or byte-level tokens),
// Push holds it back and returns "" until the character is complete.
//
// The algorithm is Hugging Face's DecodeStream: decode a small window of recent ids, emit what
// extends the previously emitted prefix, then slide the window. Keeping the previous tokens in
// the window lets context-dependent decoders (Metaspace, Strip: "▁Hello" is "Hello" at the start
// but " Hello" after a token) give the same text as a full decode.
//
// Not thread-safe; one per sequence. The Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace exa::engine {

class Tokenizer;

class StreamDecoder {
 public:
  // Beyond this many ids without a complete character, the held bytes are emitted as U+FFFD
  // rather than held forever (a model emitting invalid byte sequences must not stall a stream).
  static constexpr size_t kMaxHeldIds = 16;

  StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);

  // The text that `id` adds; "" while bytes of an incomplete character are held back.
  std::string Push(int32_t id);
  // Whatever is still held back (as U+FFFD for incomplete characters); resets the stream.
  std::string Flush();

 private:
  std::string Decode() const;
  void Restart();

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;  // The window: ids before prefix_index_ are context only.
  std::string prefix_;        // Decode of ids_[0, prefix_index_) ... as last emitted.
  size_t prefix_index_ = 0;
};

}  // namespace exa::engine
