// Lifeguard's dynamic suspicion timeout. A suspicion starts at `max` and shrinks toward `min`
// as independent nodes confirm it: with c of k wanted confirmations the timeout is
//   max - (max - min) * log(c + 1) / log(k + 1),   never below min
// (memberlist suspicion.go). The node that raised the suspicion does not count.
//
// Thread safety: none; owned by one SwimCore.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace exa::membership {

class Suspicion {
 public:
  Suspicion(std::string from, int k, absl::Duration min, absl::Duration max, absl::Time start);

  // Records a confirmation; true when it was new and independent (then it is worth gossiping).
  bool Confirm(const std::string& from);
  absl::Time deadline() const { return start_ + timeout_; }
  int confirmations() const { return static_cast<int>(confirmed_.size()) - 1; }

  // When the holder next tells the suspect directly (SwimCore::NudgeSuspects).
  absl::Time next_nudge() const { return next_nudge_; }
  void set_next_nudge(absl::Time t) { next_nudge_ = t; }

 private:
  void Recompute();

  int k_;
  absl::Duration min_;
  absl::Duration max_;
  absl::Time start_;
  absl::Duration timeout_;
  std::vector<std::string> confirmed_;  // first entry is the origin; at most k + 1 entries
  absl::Time next_nudge_ = absl::InfiniteFuture();
};

// memberlist suspicionTimeout: mult * log10(max(n, 10)) * probe interval (the Lifeguard min).
absl::Duration SuspicionMinTimeout(int mult, size_t n, absl::Duration probe_interval);

}  // namespace exa::membership
