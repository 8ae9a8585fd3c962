// Hysteresis around ElectRoles: a new assignment takes effect only once the computed result has
// stayed the same for `hold_down`, so a transient view (a suspicion that is refuted, a node
// bouncing) does not move roles back and forth. The first assignment takes effect at once.
// Pure apart from the state it holds: time comes in as `now`.
//
// Thread safety: none; owned by one caller.
#pragma once

#include <vector>

#include "absl/time/time.h"
#include "cluster/election.h"

namespace exa::cluster {

class StableElection {
 public:
  // docs/architecture.md#consistency grace: a view must hold this long before roles move.
  static constexpr absl::Duration kDefaultHoldDown = absl::Seconds(30);

  explicit StableElection(ElectionConfig config, absl::Duration hold_down = kDefaultHoldDown)
      : config_(config), hold_down_(hold_down) {}

  // Feeds the current view; returns the assignment in force.
  const Assignment& Update(absl::Time now, const std::vector<ElectionNode>& view);
  const Assignment& current() const { return current_; }

 private:
  ElectionConfig config_;
  absl::Duration hold_down_;
  bool has_current_ = false;
  Assignment current_;
  bool has_candidate_ = false;
  Assignment candidate_;
  absl::Time candidate_since_;
};

}  // namespace exa::cluster
