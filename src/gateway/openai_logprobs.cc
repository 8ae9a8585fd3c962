#include "gateway/openai_logprobs.h"

#include <cmath>

namespace exa::gateway {
namespace {

using json = nlohmann::json;

// JSON has no -infinity (a token the sampler can never draw): vLLM's stand-in for it.
double Finite(float logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

json Bytes(const std::string& text) {
  json out = json::array();
  for (unsigned char c : text) out.push_back(static_cast<int>(c));
  return out;
}

// Characters (code points) of valid UTF-8 `text`: its bytes that do not continue a sequence.
int64_t Characters(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string TokenText(const engine::Tokenizer& tokenizer, int32_t token) {
  return tokenizer.Decode(std::span<const int32_t>(&token, 1), /*skip_special_tokens=*/false);
}

json ChatLogprobs(std::span<const TokenLogprob> tokens, const engine::Tokenizer& tokenizer) {
  json content = json::array();
  for (const TokenLogprob& t : tokens) {
    const std::string text = TokenText(tokenizer, t.token);
    json top = json::array();
    for (const auto& [id, logprob] : t.top) {
      const std::string alt = TokenText(tokenizer, id);
      top.push_back({{"token", alt}, {"logprob", Finite(logprob)}, {"bytes", Bytes(alt)}});
    }
    content.push_back({{"token", text},
                       {"logprob", Finite(t.logprob)},
                       {"bytes", Bytes(text)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json LegacyLogprobs(std::span<const TokenLogprob> tokens, const engine::Tokenizer& tokenizer,
                    int64_t* offset) {
  json texts = json::array(), logprobs = json::array(), tops = json::array(),
       offsets = json::array();
  for (const TokenLogprob& t : tokens) {
    const std::string text = TokenText(tokenizer, t.token);
    json top = json::object();
    for (const auto& [id, logprob] : t.top) {
      const std::string alt = TokenText(tokenizer, id);
      if (!top.contains(alt)) top[alt] = Finite(logprob);  // the likelier of two equal texts
    }
    if (!top.contains(text)) top[text] = Finite(t.logprob);
    texts.push_back(text);
    logprobs.push_back(Finite(t.logprob));
    tops.push_back(std::move(top));
    offsets.push_back(*offset);
    *offset += Characters(text);
  }
  return {{"tokens", std::move(texts)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

}  // namespace exa::gateway
