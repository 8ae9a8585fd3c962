// tokenizer.json "pre_tokenizer": splits normalized text into the words that the BPE model
// encodes one by one. Supported: Split, ByteLevel, Metaspace, Digits, Whitespace,
// WhitespaceSplit and Sequence of those. Thread safety: immutable after parsing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_fields.h"

namespace exa::engine {

struct Piece {
  std::string text;
  // True when the piece starts where the input text started (Metaspace "first" needs it).
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece by its parts; empty parts are dropped, as Hugging Face does.
  virtual void PreTokenize(std::vector<Piece>* pieces) const = 0;
};

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json_fields::Json& node,
                                                                const std::string& path, int depth);

}  // namespace exa::engine
