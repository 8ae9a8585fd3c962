// Streaming token -> text, for stop strings and the text of stream events. The engine depends
// only on this interface; the daemon adapts the tokenizer's StreamDecoder to it
// (engine/tokenizer/). A stream never returns a broken UTF-8 sequence: it holds bytes back until
// the character is complete.
//
// Thread safety: a Detokenizer is shared and const; each TextStream belongs to one sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace exa::engine {

namespace structured {
class TokenTrie;
}  // namespace structured

class TextStream {
 public:
  virtual ~TextStream() = default;
  // The text `token` completes (possibly empty).
  virtual std::string Push(int32_t token) = 0;
  // Whatever is still held back, at the end of the sequence.
  virtual std::string Flush() { return {}; }
};

class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  // `keep_special_tokens`: the text keeps special tokens (e.g. Mistral's [TOOL_CALLS]), which it
  // leaves out by default.
  virtual std::unique_ptr<TextStream> NewStream(bool keep_special_tokens = false) const = 0;
  // The vocabulary's bytes for structured outputs (engine/structured/token_trie.h), built on
  // first use; nullptr when this detokenizer cannot say what bytes each token writes.
  virtual std::shared_ptr<const structured::TokenTrie> token_trie() const { return nullptr; }
};

}  // namespace exa::engine
