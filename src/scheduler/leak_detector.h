// Memory-leak detection (docs/architecture.md#leak-detection), pure: each replica's memory when it
// became ready is its baseline; a sample is kept every `interval` (default an hour). A replica is
// flagged when its last `rising_samples` samples each rose (by more than `noise` of the
// baseline) and the latest is at least `min_growth` above the baseline — growth that keeps rising
// and never comes back. Memory that grows and returns (a cache filling and draining) is not
// flagged; a flag clears when memory falls back near the baseline. A new generation of a replica
// (a restart) starts a new baseline.
//
// Thread safety: none; one owner.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace exa::scheduler {

struct LeakOptions {
  absl::Duration interval = absl::Hours(1);
  int rising_samples = 4;
  double min_growth = 0.10;  // of the baseline
  double noise = 0.01;       // of the baseline: a smaller rise does not count as rising
  size_t max_replicas = 100'000;
};

class LeakDetector {
 public:
  explicit LeakDetector(LeakOptions options = {}) : options_(options) {}

  // A reading of replica `id` (generation `generation`) at `now`; kept when `interval` has
  // passed since the last kept one. Returns true when it flipped the replica's flag on.
  bool Observe(const std::string& id, uint64_t generation, absl::Time now, uint64_t bytes);
  void Forget(const std::string& id);
  // Forgets the tracked ids of group `group` — an id's text up to and including its first '/',
  // the node of "node/replica" — that are not in `keep` (the replicas a node no longer reports).
  void ForgetMissing(std::string_view group, const absl::flat_hash_set<std::string>& keep);

  // Whether generation `generation` of `id` is flagged (a predecessor's flag is not its own).
  bool Flagged(const std::string& id, uint64_t generation) const;
  std::vector<std::string> FlaggedIds() const;  // sorted
  // Growth over the baseline of a tracked replica (0 when unknown).
  double Growth(const std::string& id) const;

 private:
  struct Track {
    uint64_t generation = 0;
    uint64_t baseline = 0;
    absl::Time last = absl::InfinitePast();
    std::vector<uint64_t> samples;  // the last rising_samples + 1 kept ones
    bool flagged = false;
  };
  // Hash maps by group, then by the rest of the id: every ready replica is looked up each
  // control step, and a node's are forgotten together.
  using Group = absl::flat_hash_map<std::string, Track>;
  static std::pair<absl::string_view, absl::string_view> Split(std::string_view id);
  const Track* Find(std::string_view id) const;

  LeakOptions options_;
  absl::flat_hash_map<std::string, Group> groups_;
  size_t size_ = 0;
};

}  // namespace exa::scheduler
