// tokenizer.json "normalizer": rewrites a piece of input text before pre-tokenization.
// Supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, ByteLevel
// and Sequence of those. Thread safety: immutable after parsing.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_fields.h"

namespace exa::engine {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8, and so is the result.
  virtual std::string Normalize(std::string text) const = 0;
};

// Parses the normalizer at `path` (e.g. "normalizer"); `depth` bounds nested Sequences.
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const json_fields::Json& node,
                                                            const std::string& path, int depth);

}  // namespace exa::engine
