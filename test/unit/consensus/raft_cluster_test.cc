// The spec store's consensus under faults, simulated (docs/testing.md#control-plane): clients
// apply, read and delete through RaftNode + KvState while nodes crash, pause and are partitioned,
// the leader included; every history must be linearizable and every node must end equal.
#include <catch2/catch.hpp>

#include "unit/consensus/raft_cluster.h"

namespace exa::consensus::testing {
namespace {

void CheckRun(const ClusterOptions& options) {
  ClusterReport report = RunCluster(options);
  exa::testing::LinearizabilityResult lin = exa::testing::CheckLinearizable(report.history);
  INFO("seed " << options.seed << ", " << options.nodes << " nodes: " << report.history.size()
               << " operations, " << report.ok_writes << " writes ok, " << report.ok_reads
               << " reads ok, " << report.unknown << " unknown; " << report.crashes << " crashes, "
               << report.partitions << " partitions, " << report.pauses << " pauses, "
               << report.leader_changes << " leader changes; " << lin.key << " " << lin.message
               << " " << report.divergence);
  CHECK(lin.ok);
  CHECK(report.converged);
  CHECK(report.ok_writes > 500);  // progress despite the faults: the run proves something
  CHECK(report.ok_reads > 300);
  if (options.faults) {
    CHECK(report.crashes + report.partitions + report.pauses >= 15);
  }
}

TEST_CASE("3 nodes: linearizable under crashes, pauses and partitions") {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    ClusterOptions options;
    options.seed = seed;
    CheckRun(options);
  }
}

TEST_CASE("5 nodes: linearizable under crashes, pauses and partitions") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    ClusterOptions options;
    options.nodes = 5;
    options.seed = seed;
    CheckRun(options);
  }
}

TEST_CASE("without faults every operation completes") {
  ClusterOptions options;
  options.faults = false;
  options.drop_rate = 0;
  ClusterReport report = RunCluster(options);
  CHECK(report.unknown == 0);
  CHECK(exa::testing::CheckLinearizable(report.history).ok);
  CHECK(report.converged);
}

TEST_CASE("the checker catches reads served from a node's local state") {
  // Followers lag the leader: a read without a barrier returns old values. The test would be
  // worthless if it could not see that.
  int caught = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    ClusterOptions options;
    options.seed = seed;
    options.stale_reads = true;
    ClusterReport report = RunCluster(options);
    if (!exa::testing::CheckLinearizable(report.history).ok) ++caught;
  }
  CHECK(caught >= 3);
}

}  // namespace
}  // namespace exa::consensus::testing
