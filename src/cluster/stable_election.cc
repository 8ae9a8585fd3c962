#include "cluster/stable_election.h"

namespace exa::cluster {

const Assignment& StableElection::Update(absl::Time now, const std::vector<ElectionNode>& view) {
  Assignment computed = ElectRoles(view, config_);
  if (!has_current_) {
    current_ = std::move(computed);
    has_current_ = true;
    return current_;
  }
  if (computed == current_) {
    has_candidate_ = false;
    return current_;
  }
  if (!has_candidate_ || computed != candidate_) {
    candidate_ = std::move(computed);
    candidate_since_ = now;
    has_candidate_ = true;
  }
  if (now - candidate_since_ >= hold_down_) {
    current_ = std::move(candidate_);
    has_candidate_ = false;
  }
  return current_;
}

}  // namespace exa::cluster
