// Seeded randomness. Everything that decides with a coin (probe order, gossip targets, sampling,
// power-of-two choices) takes a Random so a simulation or test replays exactly from its seed.
//
// Thread safety: none; give each owner its own instance (Fork() derives independent streams).
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>

#include "common/check.h"

namespace exa {

class Random {
 public:
  explicit Random(uint64_t seed) : engine_(seed) {}

  uint64_t Next() { return engine_(); }
  // Uniform in [0, n); n must be positive.
  uint64_t Uniform(uint64_t n) {
    EXA_CHECK(n > 0) << "Uniform(0)";
    return std::uniform_int_distribution<uint64_t>(0, n - 1)(engine_);
  }
  // Uniform in [lo, hi].
  int64_t UniformRange(int64_t lo, int64_t hi) {
    EXA_CHECK(lo <= hi) << lo << " > " << hi;
    return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
  }
  // Uniform in [0, 1).
  double UniformDouble() { return std::uniform_real_distribution<double>(0.0, 1.0)(engine_); }
  bool Bernoulli(double p) { return UniformDouble() < p; }

  template <typename Container>
  void Shuffle(Container& items) {
    std::shuffle(std::begin(items), std::end(items), engine_);
  }

  // An independent generator whose stream is a function of this one's state.
  Random Fork() { return Random(Next() ^ 0x9E3779B97F4A7C15ULL); }

 private:
  std::mt19937_64 engine_;
};

}  // namespace exa
