// Adapts the Hugging Face tokenizer (engine/tokenizer/) to the engine's Detokenizer interface,
// so stop strings and streamed text use the model's own tokenizer.json.
//
// Thread safety: the Detokenizer is immutable and shared; each stream belongs to one sequence.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/detokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace exa::engine {

class TokenizerDetokenizer final : public Detokenizer {
 public:
  explicit TokenizerDetokenizer(std::shared_ptr<const Tokenizer> tokenizer)
      : tokenizer_(std::move(tokenizer)) {}
  std::unique_ptr<TextStream> NewStream() const override;
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
};

// Loads `<model_dir>/tokenizer.json`.
absl::StatusOr<std::shared_ptr<const TokenizerDetokenizer>> LoadDetokenizer(
    const std::string& model_dir);

}  // namespace exa::engine
