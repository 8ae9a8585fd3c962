// Proves the sampler's contract: greedy is argmax, a seed fixes the draw, top-k / top-p only
// ever pick from the allowed set, repetition penalty demotes seen tokens, logprobs normalise.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "engine/sampler.h"

namespace exa::engine {
namespace {

std::vector<float> Logits() { return {1.0f, 3.0f, 2.5f, -1.0f, 0.5f, 2.9f}; }

std::vector<int32_t> Draws(const SamplingParams& p, uint64_t seed, int n) {
  Sampler s(p, seed);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    auto l = Logits();
    out.push_back(s.Sample(l, {}, i).token);
  }
  return out;
}

TEST_CASE("greedy picks the argmax and reports a normalised logprob", "[engine][sampler]") {
  SamplingParams p;
  p.logprobs = true;
  p.top_logprobs = 3;
  Sampler s(p, 1);
  auto l = Logits();
  SampledToken t = s.Sample(l, {}, 0);
  CHECK(t.token == 1);
  REQUIRE(t.top.size() == 3);
  CHECK(t.top[0].first == 1);
  CHECK(t.top[1].first == 5);
  double total = 0;
  for (float x : Logits()) total += std::exp(x - 3.0);
  CHECK(t.logprob == Approx(-std::log(total)).epsilon(1e-5));
}

TEST_CASE("the same seed gives the same draws; another seed differs", "[engine][sampler]") {
  SamplingParams p;
  p.temperature = 2.0f;
  CHECK(Draws(p, 7, 64) == Draws(p, 7, 64));
  CHECK(Draws(p, 7, 64) != Draws(p, 8, 64));
}

TEST_CASE("a token's draw depends on its seed and position only", "[engine][sampler]") {
  // What a resumed request relies on (docs/architecture.md#failover): a fresh sampler asked for
  // position i draws what the first one drew there, after any number of earlier draws.
  SamplingParams p;
  p.temperature = 2.0f;
  const std::vector<int32_t> all = Draws(p, 11, 64);
  Sampler fresh(p, 11);
  for (int i = 40; i < 64; ++i) {
    auto l = Logits();
    CHECK(fresh.Sample(l, {}, i).token == all[static_cast<size_t>(i)]);
  }
  CHECK(fresh.DeviceDraw(5).uniform == static_cast<float>(Sampler::Uniform(11, 5)));
  CHECK(Sampler::Uniform(11, 5) != Sampler::Uniform(11, 6));
  CHECK(Sampler::Uniform(11, 5) != Sampler::Uniform(12, 5));
}

TEST_CASE("top-k and top-p restrict the candidates", "[engine][sampler]") {
  SamplingParams p;
  p.temperature = 5.0f;  // nearly uniform, so every allowed token shows up
  p.top_k = 2;
  auto k = Draws(p, 3, 400);
  CHECK(std::set<int32_t>(k.begin(), k.end()) == std::set<int32_t>{1, 5});
  p.top_k = 0;
  p.temperature = 1.0f;
  p.top_p = 0.3f;  // token 1 alone holds ~0.33 of the mass
  auto top = Draws(p, 3, 100);
  CHECK(std::set<int32_t>(top.begin(), top.end()) == std::set<int32_t>{1});
}

TEST_CASE("min_p drops tokens far less likely than the most likely one", "[engine][sampler]") {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.5f;  // relative to token 1 (3.0): 2.5 and 2.9 keep more than half, 1.0 does not
  auto kept = Draws(p, 5, 400);
  CHECK(std::set<int32_t>(kept.begin(), kept.end()) == std::set<int32_t>{1, 2, 5});
  p.min_p = 1.0f;  // only the most likely
  auto top = Draws(p, 5, 50);
  CHECK(std::set<int32_t>(top.begin(), top.end()) == std::set<int32_t>{1});
  CHECK_FALSE(Sampler(p, 1).device_compatible());
  p.min_p = 1.5f;
  CHECK(std::string(ValidateSamplingParams(p).message()) == "min_p 1.5 must be in [0, 1]");
}

// The draw as the contract states it: every candidate sorted (most likely first, ties by id),
// min_p, then top_k, then top_p, then the seeded walk.
int32_t ReferenceDraw(std::vector<float> logits, const SamplingParams& p, uint64_t seed,
                      int64_t position) {
  for (float& l : logits) l /= p.temperature;
  const float top = *std::max_element(logits.begin(), logits.end());
  std::vector<std::pair<float, int32_t>> c;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (p.min_p > 0 && std::exp(double{logits[i]} - top) < p.min_p) continue;
    c.emplace_back(logits[i], static_cast<int32_t>(i));
  }
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  if (p.top_k > 0 && c.size() > static_cast<size_t>(p.top_k)) c.resize(p.top_k);
  double total = 0;
  for (const auto& x : c) total += std::exp(double{x.first} - top);
  if (p.top_p < 1) {
    double mass = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      mass += std::exp(double{c[i].first} - top) / total;
      if (mass >= p.top_p) {
        c.resize(i + 1);
        break;
      }
    }
    total = 0;
    for (const auto& x : c) total += std::exp(double{x.first} - top);
  }
  double r = Sampler::Uniform(seed, position) * total;
  for (const auto& x : c) {
    r -= std::exp(double{x.first} - top);
    if (r < 0) return x.second;
  }
  return c.back().second;
}

TEST_CASE("on a large vocabulary the draw is the one a full sort gives", "[engine][sampler]") {
  // The sampler orders only the head of the vocabulary and widens it when a cut or the draw
  // reaches past it; flat and peaked distributions, every cut, must land on the same tokens.
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 60; ++trial) {
    SamplingParams p;
    p.temperature = std::array{0.3f, 1.0f, 3.0f, 30.0f}[trial % 4];
    p.top_k = std::array{0, 0, 5, 64, 300, 5000}[trial % 6];
    p.top_p = std::array{1.0f, 0.9f, 0.999f, 0.5f, 1.0f}[trial % 5];
    p.min_p = std::array{0.0f, 0.0f, 0.05f, 0.001f}[(trial / 3) % 4];
    const float scale = std::array{0.5f, 3.0f, 8.0f}[trial % 3];
    std::vector<float> logits(20000 + trial);
    for (float& l : logits) l = scale * normal(rng);
    logits[rng() % logits.size()] = logits[rng() % logits.size()];  // a tie
    Sampler s(p, 1000 + trial);
    for (int64_t pos = 0; pos < 40; ++pos) {
      std::vector<float> l = logits;
      INFO("trial " << trial << " position " << pos);
      CHECK(s.Sample(l, {}, pos).token == ReferenceDraw(logits, p, 1000 + trial, pos));
    }
  }
}

TEST_CASE("repetition penalty demotes tokens already in the sequence", "[engine][sampler]") {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler s(p, 1);
  auto l = Logits();
  const std::vector<int32_t> history = {1};
  CHECK(s.Sample(l, history, 0).token == 5);  // 3.0 / 2 = 1.5 < 2.9
  CHECK(l[1] == 1.5f);
}

TEST_CASE("presence and frequency penalties count only the generated tokens", "[engine][sampler]") {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p, 1);
  // Prompt {1, 1}, then three generated tokens: 5 twice, 1 once.
  const std::vector<int32_t> history = {1, 1, 5, 1, 5};
  auto l = Logits();
  const std::vector<float> before(l.begin(), l.end());
  // 1: 3.0 - 0.75 = 2.25 and 5: 2.9 - 1.0 = 1.9 fall below 2: 2.5.
  CHECK(s.Sample(l, history, 3).token == 2);
  CHECK(l[5] == Approx(before[5] - 0.5f - 0.25f * 2));
  CHECK(l[1] == Approx(before[1] - 0.5f - 0.25f));  // the prompt's two 1s are not counted
  CHECK(l[0] == before[0]);
  CHECK_FALSE(s.device_compatible());
  // Negative values encourage repeats; nothing generated yet, nothing changes.
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 0.0f;
  Sampler encourage(p, 1);
  auto fresh = Logits();
  CHECK(encourage.Sample(fresh, history, 0).token == 1);
  CHECK(fresh[5] == before[5]);
}

TEST_CASE("logit_bias shifts the chosen logits before temperature", "[engine][sampler]") {
  SamplingParams p;
  p.logit_bias = {{1, -100.0f}, {3, 4.5f}, {99, 50.0f}};  // 99: past the vocabulary, ignored
  Sampler s(p, 1);
  auto l = Logits();
  CHECK(s.Sample(l, {}, 0).token == 3);  // -1.0 + 4.5 = 3.5 beats 2.9
  CHECK(l[1] == -97.0f);
  CHECK_FALSE(s.device_compatible());
  p.logit_bias = {{2, 101.0f}};
  CHECK(std::string(ValidateSamplingParams(p).message()).find("[-100, 100]") != std::string::npos);
}

TEST_CASE("tokens masked to -infinity are never drawn nor listed as alternatives",
          "[engine][sampler]") {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_logprobs = 5;
  Sampler s(p, 7);
  const float kOut = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l = {kOut, 0.5f, kOut, 0.2f, kOut, kOut};
    const SampledToken t = s.Sample(l, {}, i);
    CHECK((t.token == 1 || t.token == 3));
    REQUIRE(t.top.size() == 2);  // two tokens are possible, not five
    CHECK(std::isfinite(t.top[1].second));
  }
}

TEST_CASE("invalid sampling parameters are rejected", "[engine][sampler]") {
  SamplingParams p;
  CHECK(ValidateSamplingParams(p).ok());
  p.top_p = 1.5f;
  CHECK(ValidateSamplingParams(p).code() == absl::StatusCode::kInvalidArgument);
  p = {};
  p.temperature = -1.0f;
  CHECK_FALSE(ValidateSamplingParams(p).ok());
  p = {};
  p.frequency_penalty = 2.5f;
  CHECK(std::string(ValidateSamplingParams(p).message()) ==
        "frequency_penalty 2.5 must be in [-2, 2]");
}

}  // namespace
}  // namespace exa::engine
