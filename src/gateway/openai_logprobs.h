// Token log-probabilities in OpenAI's two shapes (docs/reference/api.md#log-probabilities): the
// chat shape, choices[].logprobs = {"content": [{token, logprob, bytes, top_logprobs}]}, and the
// legacy /v1/completions shape, choices[].logprobs = {tokens, token_logprobs, top_logprobs,
// text_offset}. A token's text is the token decoded alone, as vLLM reports it. Pure.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace exa::gateway {

// One generated token: its log-probability and the most likely tokens at its position.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), most likely first
};

// The text of `token` decoded alone (a piece of a UTF-8 character decodes to U+FFFD).
std::string TokenText(const engine::Tokenizer& tokenizer, int32_t token);

// {"content": [...]}: each token with its UTF-8 bytes and its position's alternatives.
nlohmann::json ChatLogprobs(std::span<const TokenLogprob> tokens,
                            const engine::Tokenizer& tokenizer);

// {tokens, token_logprobs, top_logprobs, text_offset}: top_logprobs maps each position's most
// likely tokens, and the chosen one, to their log-probabilities (so up to N + 1 entries).
// `text_offset` counts characters from `*offset`, which is advanced past the last token, so a
// stream's chunks continue one another.
nlohmann::json LegacyLogprobs(std::span<const TokenLogprob> tokens,
                              const engine::Tokenizer& tokenizer, int64_t* offset);

}  // namespace exa::gateway
