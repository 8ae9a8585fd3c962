// Lifeguard local health ("awareness"): a score in [0, max] that rises when this node misses
// nacks, fails probes or has to refute a suspicion about itself, and falls with each successful
// probe. A slow node (CPU starved, GC, paused) then waits longer before blaming others: probe
// interval and timeout are multiplied by (score + 1).
//
// Thread safety: none; owned by one SwimCore.
#pragma once

#include <algorithm>

#include "absl/time/time.h"

namespace exa::membership {

class Awareness {
 public:
  explicit Awareness(int max_score) : max_(max_score) {}
  void ApplyDelta(int delta) { score_ = std::clamp(score_ + delta, 0, max_); }
  int score() const { return score_; }
  absl::Duration Scale(absl::Duration d) const { return d * (score_ + 1); }

 private:
  int max_;
  int score_ = 0;
};

}  // namespace exa::membership
