// Role election gives every node the same answer from the same view, fills the control roles
// the way docs/architecture.md#roles sizes them (storage per rack, schedulers spread over racks),
// respects pinned roles, keeps small clusters serving, and does not flap thanks to the hold-down.
#include "cluster/election.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cluster/stable_election.h"
#include "common/random.h"

namespace exa::cluster {
namespace {

std::vector<ElectionNode> Cluster(int n, int racks) {
  std::vector<ElectionNode> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(ElectionNode{
        "node-" + std::to_string(1000 + i * 7919 % 997), "rack-" + std::to_string(i % racks), {}});
  }
  return out;
}

int Count(const Assignment& a, Role r) {
  return static_cast<int>(
      std::count_if(a.begin(), a.end(), [r](const auto& kv) { return kv.second.Has(r); }));
}

std::set<std::string> RacksOf(const Assignment& a, const std::vector<ElectionNode>& nodes, Role r) {
  std::set<std::string> racks;
  for (const ElectionNode& n : nodes) {
    if (a.at(n.id).Has(r)) racks.insert(n.rack);
  }
  return racks;
}

TEST_CASE("A lone node takes every role", "[cluster][election]") {
  Assignment a = ElectRoles({ElectionNode{"solo", "", {}}}, ElectionConfig{});
  CHECK(a.at("solo") == RoleSet::All());
}

TEST_CASE("256 nodes in 16 racks: storage per rack, schedulers and gateways spread",
          "[cluster][election]") {
  std::vector<ElectionNode> nodes = Cluster(256, 16);
  Assignment a = ElectRoles(nodes, ElectionConfig{});
  REQUIRE(a.size() == 256);
  CHECK(Count(a, Role::kStorage) == 16);
  CHECK(RacksOf(a, nodes, Role::kStorage).size() == 16);
  int schedulers = Count(a, Role::kScheduler);
  CHECK(schedulers >= 3);
  CHECK(schedulers <= 12);
  CHECK(schedulers % 2 == 1);
  CHECK(RacksOf(a, nodes, Role::kScheduler).size() >= 3);
  CHECK(Count(a, Role::kGateway) == 16);
  CHECK(Count(a, Role::kObserver) == 2);
  int inference = Count(a, Role::kInference);
  CHECK(inference >= 200);
  CHECK(inference <= 220);
  for (const auto& [id, roles] : a) {
    // At this size nobody doubles up (docs/architecture.md#roles: co-location starved heartbeats).
    CHECK(roles.Names().size() == 1);
  }
}

TEST_CASE("The assignment does not depend on the order of the view", "[cluster][election]") {
  std::vector<ElectionNode> nodes = Cluster(100, 7);
  Assignment a = ElectRoles(nodes, ElectionConfig{});
  Random rng(3);
  for (int i = 0; i < 5; ++i) {
    rng.Shuffle(nodes);
    CHECK(ElectRoles(nodes, ElectionConfig{}) == a);
  }
}

TEST_CASE("Pinned roles are kept and count toward the targets", "[cluster][election]") {
  std::vector<ElectionNode> nodes = Cluster(40, 4);
  nodes[0].pinned = RoleSet{Role::kScheduler};
  nodes[1].pinned = RoleSet{Role::kGateway, Role::kObserver};
  Assignment a = ElectRoles(nodes, ElectionConfig{});
  CHECK(a.at(nodes[0].id) == RoleSet{Role::kScheduler});
  CHECK(a.at(nodes[1].id) == (RoleSet{Role::kGateway, Role::kObserver}));
  CHECK(Count(a, Role::kScheduler) == SchedulerTarget(40, ElectionConfig{}));
}

TEST_CASE("Small clusters double up but still serve inference", "[cluster][election]") {
  for (int n = 2; n <= 6; ++n) {
    Assignment a = ElectRoles(Cluster(n, 1), ElectionConfig{});
    INFO("n = " << n);
    CHECK(Count(a, Role::kInference) >= 1);
    CHECK(Count(a, Role::kScheduler) == std::min(n, 3));
    CHECK(Count(a, Role::kStorage) == 1);
    CHECK(Count(a, Role::kGateway) == 1);
  }
}

TEST_CASE("One node joining moves few roles (rendezvous hashing)", "[cluster][election]") {
  std::vector<ElectionNode> nodes = Cluster(200, 10);
  Assignment before = ElectRoles(nodes, ElectionConfig{});
  nodes.push_back(ElectionNode{"node-new", "rack-3", {}});
  Assignment after = ElectRoles(nodes, ElectionConfig{});
  int moved = 0;
  for (const auto& [id, roles] : before) moved += after.at(id) == roles ? 0 : 1;
  CHECK(moved <= 4);
}

TEST_CASE("Hold-down: a new assignment waits until the view is stable", "[cluster][election]") {
  absl::Time t = absl::UnixEpoch();
  StableElection election(ElectionConfig{}, absl::Seconds(30));
  std::vector<ElectionNode> full = Cluster(30, 3);
  Assignment first = election.Update(t, full);
  std::vector<ElectionNode> fewer(full.begin(), full.end() - 10);
  Assignment changed = ElectRoles(fewer, ElectionConfig{});
  REQUIRE(changed != first);
  // Flapping view: never stable for 30 s, so roles do not move.
  for (int i = 1; i <= 10; ++i) {
    CHECK(election.Update(t + absl::Seconds(10 * i), i % 2 ? fewer : full) == first);
  }
  // Stable view: takes effect after the hold-down.
  absl::Time s = t + absl::Seconds(200);
  CHECK(election.Update(s, fewer) == first);
  CHECK(election.Update(s + absl::Seconds(29), fewer) == first);
  CHECK(election.Update(s + absl::Seconds(30), fewer) == changed);
}

}  // namespace
}  // namespace exa::cluster
