// A simulated network of RaftNodes over KvState, with clients recording a history and a nemesis
// that crashes, pauses and partitions nodes: the deterministic half of the spec store's
// linearizability proof (docs/testing.md#control-plane). Time is simulated; a seed fixes every
// choice.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "consensus/kv_state.h"
#include "consensus/raft_node.h"
#include "support/linearizability.h"

namespace exa::consensus::testing {

struct ClusterOptions {
  int nodes = 3;
  int clients = 4;
  int keys = 5;
  uint64_t seed = 1;
  absl::Duration duration = absl::Seconds(60);
  bool faults = true;
  double drop_rate = 0.02;
  // Reads answered from any node's local state, without a barrier (not linearizable: the
  // checker must catch it).
  bool stale_reads = false;
  unsigned snapshot_threshold = 64;
  unsigned snapshot_trailing = 16;
};

struct ClusterReport {
  std::vector<exa::testing::KvOperation> history;
  size_t ok_writes = 0;
  size_t ok_reads = 0;
  size_t unknown = 0;
  size_t crashes = 0;
  size_t partitions = 0;
  size_t pauses = 0;
  size_t leader_changes = 0;
  bool converged = false;  // every node holds the same records at the end
  std::string divergence;
};

ClusterReport RunCluster(const ClusterOptions& options);

}  // namespace exa::consensus::testing
