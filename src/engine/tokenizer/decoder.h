// tokenizer.json "decoder": turns the token strings of a sequence of ids back into text.
// Supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence of those,
// each a port of Hugging Face's decode_chain. Thread safety: immutable after parsing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_fields.h"

namespace exa::engine {

// What decoding does with bytes that do not form UTF-8 characters: Hugging Face's U+FFFD, or
// kept as they are (a single token's own bytes, for structured outputs).
enum class InvalidUtf8 { kReplace, kKeep };

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the list of token strings; the decoded text is the concatenation of the result.
  virtual void DecodeChain(std::vector<std::string>* tokens, InvalidUtf8 invalid) const = 0;
};

absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const json_fields::Json& node,
                                                      const std::string& path, int depth);

}  // namespace exa::engine
