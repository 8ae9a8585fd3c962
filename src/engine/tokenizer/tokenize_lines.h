// The body of `exaserve-cli tokenize --tokenizer FILE [--decode]`, kept here so the
// CLI is a thin wrapper and the behaviour is unit-tested:
//   encode: each input line is one JSON string; each output line is a JSON array of ids.
//   decode: each input line is a JSON array of ids; each output line is a JSON string.
// Blank lines are skipped. The first bad line stops the run with INVALID_ARGUMENT naming its line
// number and what was wrong; lines before it have been written.
#pragma once

#include <istream>
#include <ostream>

#include "absl/status/status.h"
#include "engine/tokenizer/tokenizer.h"

namespace exa::engine {

struct TokenizeLinesOptions {
  bool decode = false;
  // Encode: apply the post-processor (e.g. Llama's leading <s>), as Hugging Face's encode does
  // by default.
  bool add_special_tokens = true;
  // Decode: leave out special tokens such as <|im_end|>.
  bool skip_special_tokens = false;
};

absl::Status TokenizeLines(const Tokenizer& tokenizer, std::istream& in, std::ostream& out,
                           const TokenizeLinesOptions& options);

}  // namespace exa::engine
