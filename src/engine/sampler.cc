#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/strings.h"

namespace exa::engine {
namespace {

void ApplyRepetitionPenalty(std::span<float> logits, std::span<const int32_t> history,
                            float penalty) {
  if (penalty == 1.0f) return;
  std::vector<bool> seen(logits.size(), false);
  for (int32_t id : history) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size() || seen[id]) continue;
    seen[id] = true;
    float& l = logits[id];
    l = l > 0 ? l / penalty : l * penalty;  // transformers' RepetitionPenaltyLogitsProcessor
  }
}

// OpenAI's presence and frequency penalties over the generated tokens `output`:
// logit -= presence * (count > 0) + frequency * count.
void ApplyOutputPenalties(std::span<float> logits, std::span<const int32_t> output, float presence,
                          float frequency) {
  if (presence == 0.0f && frequency == 0.0f) return;
  std::vector<int32_t> count(logits.size(), 0);
  for (int32_t id : output) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) ++count[id];
  }
  for (size_t id = 0; id < logits.size(); ++id) {
    if (count[id] > 0) logits[id] -= presence + frequency * static_cast<float>(count[id]);
  }
}

int32_t ArgMax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// log-sum-exp of the logits, for log-probabilities.
double LogNormaliser(std::span<const float> logits) {
  const float m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(double{l} - m);
  return m + std::log(sum);
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f && p.temperature <= 100.0f)) {
    return absl::InvalidArgumentError(
        StrCat("temperature ", p.temperature, " must be in [0, 100]"));
  }
  if (p.top_k < 0) return absl::InvalidArgumentError(StrCat("top_k ", p.top_k, " must be >= 0"));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(StrCat("top_p ", p.top_p, " must be in (0, 1]"));
  }
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 10.0f)) {
    return absl::InvalidArgumentError(
        StrCat("repetition_penalty ", p.repetition_penalty, " must be in (0, 10]"));
  }
  for (auto [name, v] : {std::pair{"presence_penalty", p.presence_penalty},
                         std::pair{"frequency_penalty", p.frequency_penalty}}) {
    if (!(v >= -2.0f && v <= 2.0f)) {
      return absl::InvalidArgumentError(StrCat(name, " ", v, " must be in [-2, 2]"));
    }
  }
  if (p.logit_bias.size() > kMaxLogitBias) {
    return absl::InvalidArgumentError(
        StrCat("logit_bias: ", p.logit_bias.size(), " entries; at most ", kMaxLogitBias));
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || !(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(StrCat("logit_bias: token ", id, " bias ", bias,
                                               ": ids are >= 0 and biases in [-100, 100]"));
    }
  }
  if (p.top_logprobs < 0 || p.top_logprobs > 20) {
    return absl::InvalidArgumentError(
        StrCat("top_logprobs ", p.top_logprobs, " must be in [0, 20]"));
  }
  return absl::OkStatus();
}

double Sampler::Uniform(uint64_t seed, int64_t position) {
  // SplitMix64's finaliser over (seed, position): every position an independent-looking draw,
  // with no state carried from one token to the next.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  const uint64_t bits = mix(seed + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(position) + 1));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

int32_t Sampler::Draw(std::span<const float> logits, int64_t position) {
  // Candidates sorted by logit (ties by id, so the order never depends on the sort's whims).
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
  }
  auto better = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = static_cast<size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), better);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), better);
  }
  const float top = candidates_[0].first;
  std::vector<double> probs(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i)
    total += probs[i] = std::exp(double{candidates_[i].first} - top);
  if (params_.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) {
      mass += probs[i] / total;
      if (mass >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
  }
  double r = Uniform(seed_, position) * total;
  for (size_t i = 0; i < keep; ++i) {
    r -= probs[i];
    if (r < 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

DeviceSampling Sampler::DeviceDraw(int64_t position) const {
  DeviceSampling d;
  d.temperature = params_.temperature;
  d.top_k = params_.top_k;
  d.top_p = params_.top_p;
  if (params_.temperature > 0.0f) d.uniform = static_cast<float>(Uniform(seed_, position));
  // A draw that rounds up to 1.0f in float would fall past the last kept token.
  d.uniform = std::min(d.uniform, std::nextafter(1.0f, 0.0f));
  return d;
}

SampledToken Sampler::Sample(std::span<float> logits, std::span<const int32_t> history,
                             int64_t position) {
  ApplyRepetitionPenalty(logits, history, params_.repetition_penalty);
  const size_t generated =
      std::min(history.size(), static_cast<size_t>(std::max<int64_t>(0, position)));
  ApplyOutputPenalties(logits, history.last(generated), params_.presence_penalty,
                       params_.frequency_penalty);
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[id] += bias;
  }
  if (params_.temperature > 0.0f) {
    for (float& l : logits) l /= params_.temperature;
  }
  SampledToken out;
  out.token = params_.temperature > 0.0f ? Draw(logits, position) : ArgMax(logits);
  if (!params_.logprobs && params_.top_logprobs == 0) return out;
  const double norm = LogNormaliser(logits);
  out.logprob = static_cast<float>(logits[out.token] - norm);
  if (params_.top_logprobs > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t n = std::min(ids.size(), static_cast<size_t>(params_.top_logprobs));
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < n; ++i) {
      // Tokens a structured output's mask ruled out have no probability: not alternatives.
      if (std::isinf(logits[ids[i]])) break;
      out.top.emplace_back(ids[i], static_cast<float>(logits[ids[i]] - norm));
    }
  }
  return out;
}

}  // namespace exa::engine
