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

namespace exa::consensus {
namespace {

// Two clusters that each bootstrapped alone lead the same term; the one's messages must not reach
// the other's libraft, which would take its sender for its own leader while leading (memory that
// holds its leader state), and crash on a later tick.
TEST_CASE("a leader refuses a message from another cluster's leader of its own term") {
  absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  MemoryLogStorage storage_a, storage_b;
  KvState kv_a, kv_b;
  RaftOptions options_a, options_b;
  options_a.self = "a";
  options_b.self = "b";
  auto a = RaftNode::Start(options_a, &storage_a, &kv_a, now, {"a"});
  auto b = RaftNode::Start(options_b, &storage_b, &kv_b, now, {"b"});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto tick = [&](absl::Duration d) {
    for (absl::Time end = now + d; now < end; now += absl::Milliseconds(10)) {
      (*a)->Tick(now);
      (*b)->Tick(now);
    }
  };
  tick(absl::Seconds(3));
  REQUIRE((*a)->IsLeader());
  REQUIRE((*b)->IsLeader());
  REQUIRE((*a)->Term() == (*b)->Term());

  // a adds b as a standby, so its AppendEntries (of the term b leads too) go to b.
  REQUIRE((*a)->AddServer(now, "b").ok());
  tick(absl::Milliseconds(300));
  REQUIRE((*a)->AssignRole(now, "b", /*RAFT_STANDBY*/ 0).ok());
  tick(absl::Milliseconds(300));
  int refused = 0;
  for (const Outgoing& m : (*a)->TakeMessages()) {
    if (m.to != "b") continue;
    absl::Status s = (*b)->Receive(now, m.bytes);
    INFO(s.message());
    CHECK(absl::IsFailedPrecondition(s));
    CHECK(s.message().find("another raft cluster") != std::string_view::npos);
    ++refused;
  }
  CHECK(refused > 0);
  tick(absl::Seconds(5));  // b ticks on as the leader of its own cluster, unharmed
  CHECK((*b)->IsLeader());
  CHECK((*b)->Configuration().size() == 1);
}

}  // namespace
}  // namespace exa::consensus
