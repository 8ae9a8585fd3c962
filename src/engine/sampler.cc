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

// Most likely first, ties by id, so the order never depends on a sort's whims.
// A function object rather than a function, so that the sorts inline it.
struct Better {
  bool operator()(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) const {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  }
};

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
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return absl::InvalidArgumentError(StrCat("min_p ", p.min_p, " must be in [0, 1]"));
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

double Sampler::Mass(size_t from, size_t to) const {
  double mass = 0;
  for (size_t i = from; i < to; ++i) mass += std::exp(double{candidates_[i].first} - top_);
  return mass;
}

size_t Sampler::Crossing(size_t end, double target, bool inclusive) {
  const auto reached = [&](double mass) { return inclusive ? mass >= target : mass > target; };
  // The ordered head first: a draw nearly always ends there.
  double base = 0;
  const size_t head = std::min(head_, end);
  for (size_t i = 0; i < head; ++i) {
    base += head_probs_[i];
    if (reached(base)) return i;
  }
  // Past it, select by mass (quickselect): split the range at a pivot into the better and the
  // worse candidates, and go on in the half where the running mass reaches the target. The
  // candidates before `lo` are all better than those in [lo, hi), which are better than the rest.
  // A pivot that keeps splitting badly (an adversarial order) ends in the sort below.
  size_t lo = head, hi = end;
  for (int level = 0; hi - lo > 32 && level < 64; ++level) {
    const std::pair<float, int32_t> pivot = candidates_[lo + (hi - lo) / 2];
    const auto split = std::partition(candidates_.begin() + lo, candidates_.begin() + hi,
                                      [&](const auto& c) { return Better()(c, pivot); });
    const size_t m = static_cast<size_t>(split - candidates_.begin());
    std::iter_swap(split, std::find(split, candidates_.begin() + hi, pivot));
    const double left = Mass(lo, m);
    if (reached(base + left)) {
      hi = m;
      continue;
    }
    base += left + Mass(m, m + 1);
    if (reached(base)) return m;
    lo = m + 1;
  }
  std::sort(candidates_.begin() + lo, candidates_.begin() + hi, Better());
  for (size_t i = lo; i < hi; ++i) {
    base += Mass(i, i + 1);
    if (reached(base)) return i;
  }
  return end - 1;  // rounding left the target just past the mass: the last candidate
}

int32_t Sampler::Draw(std::span<const float> logits, int64_t position) {
  // The kept tokens are the first of the candidates in `Better` order: min_p drops the unlikely
  // ones first (as vLLM applies it), then top_k and top_p keep a prefix, and the draw walks it.
  // Nothing sorts the whole vocabulary: the most likely kDrawHead are put in order, where a draw
  // nearly always ends, and past them the crossing is found by mass (Crossing). The token is the
  // one a sort of the whole vocabulary gives (docs/architecture.md#sampling).
  top_ = *std::max_element(logits.begin(), logits.end());
  const float floor = params_.min_p > 0.0f ? top_ + std::log(params_.min_p)
                                           : -std::numeric_limits<float>::infinity();
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    // Tokens with no probability (a structured output's mask) are never candidates.
    if (logits[i] >= floor && logits[i] > -std::numeric_limits<float>::infinity()) {
      candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
    }
  }
  if (candidates_.empty()) return ArgMax(logits);
  size_t keep = candidates_.size();
  if (params_.top_k > 0) keep = std::min(keep, static_cast<size_t>(params_.top_k));
  head_ = std::min(keep, kDrawHead);
  const auto begin = candidates_.begin();
  std::partial_sort(begin, begin + static_cast<ptrdiff_t>(head_), candidates_.end(), Better());
  if (keep > head_ && keep < candidates_.size()) {  // top_k: the k most likely, past the head
    std::nth_element(begin + static_cast<ptrdiff_t>(head_), begin + static_cast<ptrdiff_t>(keep),
                     candidates_.end(), Better());
  }
  head_probs_.resize(head_);
  double total = 0;
  for (size_t i = 0; i < head_; ++i) total += head_probs_[i] = Mass(i, i + 1);
  total += Mass(head_, keep);
  if (params_.top_p < 1.0f) {  // the smallest prefix whose mass reaches top_p
    keep = Crossing(keep, params_.top_p * total, /*inclusive=*/true) + 1;
    total = 0;
    for (size_t i = 0; i < std::min(keep, head_); ++i) total += head_probs_[i];
    total += Mass(std::min(keep, head_), keep);
  }
  return candidates_[Crossing(keep, Uniform(seed_, position) * total, /*inclusive=*/false)].second;
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
