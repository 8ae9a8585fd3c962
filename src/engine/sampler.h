// Token selection from one position's logits: repetition, presence and frequency penalties,
// temperature, min-p, top-k, top-p, then a seeded draw (or argmax when temperature is 0). The draw
// for a request's i-th generated token is a function of (seed, i) alone, not of a stream that lives
// in one replica: the same seed and the same logits give the same token whatever else shares the
// batch, and a request resumed on another replica after i tokens draws token i as the first replica
// would have (docs/architecture.md#failover).
//
// Thread safety: a Sampler belongs to one sequence and is used by the engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend.h"

namespace exa::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  // vLLM's min_p: tokens less likely than min_p x the most likely token's probability (after
  // temperature) are dropped, before top_k and top_p. 0: off; allowed [0, 1].
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;  // 1: off; HF semantics over prompt and output tokens
  // OpenAI's, over the tokens generated so far: a token's logit falls by presence_penalty once
  // it has appeared and by frequency_penalty times its count. 0: off; allowed [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // OpenAI's logit_bias: (token id, bias) added to those logits before temperature; at most
  // kMaxLogitBias, each bias in [-100, 100]. Ids past the vocabulary change nothing.
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::optional<uint64_t> seed;  // unset: drawn from the engine's own stream
  bool logprobs = false;         // report the chosen token's log-probability
  int32_t top_logprobs = 0;      // and this many most likely alternatives (<= 20)
};

inline constexpr size_t kMaxLogitBias = 300;

absl::Status ValidateSamplingParams(const SamplingParams& params);

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;  // log-softmax after penalty and temperature (filled when requested)
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), most likely first
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, uint64_t seed) : params_(params), seed_(seed) {}

  // The request's `position`-th generated token (0 for the first). `logits` is scratch: it is
  // modified in place. `history` holds prompt and generated tokens.
  SampledToken Sample(std::span<float> logits, std::span<const int32_t> history, int64_t position);

  // Whether a device can choose this sequence's tokens (Backend::SampleRows): everything but the
  // penalties, logit_bias, min_p and log-probabilities, which need the logits on the host.
  bool device_compatible() const {
    return params_.repetition_penalty == 1.0f && params_.presence_penalty == 0.0f &&
           params_.min_p == 0.0f && params_.frequency_penalty == 0.0f &&
           params_.logit_bias.empty() && !params_.logprobs && params_.top_logprobs == 0;
  }
  // The `position`-th token's parameters for the device, with the uniform draw Sample would take
  // there. The device walks kept tokens in id order where Sample walks them most likely first,
  // so a seeded request repeats its output on the same backend, not across backends.
  DeviceSampling DeviceDraw(int64_t position) const;

  // The uniform draw in [0, 1) for a request's `position`-th token under `seed`.
  static double Uniform(uint64_t seed, int64_t position);

 private:
  int32_t Draw(std::span<const float> logits, int64_t position);

  // The most likely candidates a draw puts in order; past them it selects by mass.
  static constexpr size_t kDrawHead = 64;

  // The unnormalised mass (exp(logit - top_)) of candidates_[from, to).
  double Mass(size_t from, size_t to) const;
  // The index, in order, of the first of candidates_[0, end) whose running mass reaches `target`
  // (>= when inclusive, else >), the candidates rearranged so that the ones before it are the
  // better ones; end - 1 when the mass falls short by rounding.
  size_t Crossing(size_t end, double target, bool inclusive);

  SamplingParams params_;
  uint64_t seed_;
  // Scratch of Draw, reused across calls: (logit, id) of the candidates, the ordered head's size
  // and masses, and the largest logit.
  std::vector<std::pair<float, int32_t>> candidates_;
  size_t head_ = 0;
  std::vector<double> head_probs_;
  float top_ = 0.0f;
};

}  // namespace exa::engine
