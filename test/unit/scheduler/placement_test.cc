// Placement: bin-packing onto node GPUs that agrees with the planner, honours cordons, taints,
// role purity and topology preferences, is deterministic and fast, and explains failures.
#include <catch2/catch.hpp>
#include <chrono>
#include <ctime>

#include "common/strings.h"
#include "fmt/format.h"
#include "scheduler/memory_planner.h"
#include "scheduler/placement.h"

namespace exa::scheduler {
namespace {

constexpr uint64_t kGi = uint64_t{1} << 30;

std::vector<NodeInventory> Cluster(int nodes, int racks, uint64_t gpu_bytes = 80 * kGi) {
  std::vector<NodeInventory> out;
  for (int i = 0; i < nodes; ++i) {
    NodeInventory n;
    n.id = fmt::format("node-{:03d}", i);
    n.rack = fmt::format("rack-{:02d}", i % racks);
    n.roles = {cluster::Role::kInference};
    for (int g = 0; g < 8; ++g) n.gpus.push_back(GpuDevice{gpu_bytes, StrCat("nvl-", i)});
    out.push_back(std::move(n));
  }
  return out;
}

PlacementRequest Request(int count, bool same_rack = false) {
  PlacementRequest r;
  r.deployment = "llama";
  r.count = count;
  r.replica_bytes = 53 * kGi;
  r.topology.prefer_same_rack = same_rack;
  return r;
}

std::map<std::string, int> PerNode(const std::vector<Allocation>& placed) {
  std::map<std::string, int> out;
  for (const Allocation& a : placed) out[a.node]++;
  return out;
}

TEST_CASE("Among nodes equal for spreading, those holding the weights are chosen first") {
  auto nodes = Cluster(8, 2);
  MemoryLedger ledger;
  PlacementRequest r = Request(2);
  r.staged_nodes = {"node-005", "node-006"};  // one in each rack
  PlacementResult placed = Place(nodes, ledger, r, PlacementOptions{});
  REQUIRE(placed.placed.size() == 2);
  CHECK(PerNode(placed.placed) == std::map<std::string, int>{{"node-005", 1}, {"node-006", 1}});
  // Spreading still comes first: a third replica does not stack on a staged node.
  r.count = 1;
  r.existing_per_node = {{"node-005", 1}, {"node-006", 1}};
  PlacementResult third = Place(nodes, ledger, r, PlacementOptions{});
  REQUIRE(third.placed.size() == 1);
  CHECK(third.placed[0].node != "node-005");
  CHECK(third.placed[0].node != "node-006");
}

TEST_CASE("3072 replicas of 53Gi fill 256 nodes x 8 x 80Gi at 12 per node, fast") {
  auto nodes = Cluster(256, 16);
  MemoryLedger ledger;
  std::clock_t start = std::clock();
  PlacementResult r = Place(nodes, ledger, Request(3072), PlacementOptions{});
  double cpu_s = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  CHECK(r.placed.size() == 3072);
  CHECK(r.unplaced == 0);
  for (const auto& [node, count] : PerNode(r.placed)) CHECK(count == 12);
  CHECK(TopologySatisfied(nodes, r.placed, TopologySpec{}, 53 * kGi, 1) == 1.0);
  WARN("placement CPU seconds: " << cpu_s);  // the 1 s bound is checked by exaserve-sim
  // The 3073rd replica has nowhere to go, and the reason says why.
  PlacementResult more = Place(nodes, ledger, Request(1), PlacementOptions{});
  CHECK(more.unplaced == 1);
  CHECK(more.reason.find("256 lack free GPU memory") != std::string::npos);
}

TEST_CASE("Placement agrees with the planner's replicas per node") {
  PlanInput in;
  in.model = *PresetModel("llama-2-13b");
  in.gpu_memory_bytes = 80 * kGi;
  auto plan = PlanMemory(in);
  REQUIRE(plan.ok());
  auto nodes = Cluster(1, 1);
  MemoryLedger ledger;
  PlacementRequest req = Request(100);
  req.replica_bytes = plan->replica_bytes;
  PlacementResult r = Place(nodes, ledger, req, PlacementOptions{});
  CHECK(static_cast<int>(r.placed.size()) == plan->replicas_per_node);
}

TEST_CASE("Same inputs, same placement") {
  auto nodes = Cluster(32, 4);
  MemoryLedger a, b;
  CHECK(Place(nodes, a, Request(100), {}).placed == Place(nodes, b, Request(100), {}).placed);
}

TEST_CASE("Cordoned, tainted, control-role and inconsistent nodes get nothing") {
  auto nodes = Cluster(8, 2);
  nodes[0].cordoned = true;
  nodes[1].taints = {"burn-in-failed"};
  nodes[2].roles = {cluster::Role::kScheduler};
  nodes[3].gpus[2].memory_bytes = 0;  // contradicts itself
  MemoryLedger ledger;
  PlacementResult r = Place(nodes, ledger, Request(100), {});
  CHECK(r.placed.size() == 4 * 12);
  for (const Allocation& a : r.placed) {
    CHECK(a.node != "node-000");
    CHECK(a.node != "node-001");
    CHECK(a.node != "node-002");
    CHECK(a.node != "node-003");
  }
  CHECK(r.reason.find("1 are cordoned") != std::string::npos);
  CHECK(r.reason.find("1 are tainted (burn-in-failed)") != std::string::npos);
  CHECK(r.reason.find("1 hold a control role") != std::string::npos);
  CHECK(r.reason.find("GPU 2 reports 0") != std::string::npos);
}

TEST_CASE("A small cluster relaxes role purity; it is configurable") {
  auto nodes = Cluster(1, 1);
  nodes[0].roles = cluster::RoleSet::All();
  MemoryLedger ledger;
  CHECK(Place(nodes, ledger, Request(1), {}).placed.size() == 1);
  PlacementOptions strict;
  strict.small_cluster_max_nodes = 0;
  MemoryLedger empty;
  CHECK(Place(nodes, empty, Request(1), strict).placed.empty());
}

TEST_CASE("Spread across racks by default, grouped by rack when asked") {
  auto nodes = Cluster(16, 4);
  MemoryLedger spread_ledger;
  PlacementResult spread = Place(nodes, spread_ledger, Request(8), {});
  std::map<std::string, int> per_rack;
  for (const Allocation& a : spread.placed) {
    for (const NodeInventory& n : nodes) {
      if (n.id == a.node) per_rack[n.rack]++;
    }
  }
  CHECK(per_rack.size() == 4);
  for (const auto& [rack, count] : per_rack) CHECK(count == 2);
  CHECK(PerNode(spread.placed).size() == 8);  // and across nodes within a rack

  MemoryLedger group_ledger;
  PlacementResult grouped = Place(nodes, group_ledger, Request(40, true), {});
  per_rack.clear();
  for (const Allocation& a : grouped.placed) {
    for (const NodeInventory& n : nodes) {
      if (n.id == a.node) per_rack[n.rack]++;
    }
  }
  // 4 nodes × 12 per rack: 40 replicas fit in one rack.
  CHECK(per_rack.size() == 1);
  TopologySpec same_rack;
  same_rack.prefer_same_rack = true;
  CHECK(TopologySatisfied(nodes, grouped.placed, same_rack, 53 * kGi, 1) == 1.0);
  CHECK(TopologySatisfied(nodes, spread.placed, same_rack, 53 * kGi, 1) < 0.5);
}

TEST_CASE("Elastic replicas fill the nodes that hold the deployment, spread over racks") {
  auto nodes = Cluster(16, 4);  // 4 racks of 4 nodes, 12 replicas a node
  MemoryLedger ledger;
  // A floor of 4 spread (one a rack), then 20 elastic: they fill those 4 nodes rather than
  // starting on the other 12, still alternating racks.
  PlacementRequest r = Request(24);
  r.pack_last = 20;
  PlacementResult placed = Place(nodes, ledger, r, PlacementOptions{});
  REQUIRE(placed.placed.size() == 24);
  std::map<std::string, int> per_node = PerNode(placed.placed);
  CHECK(per_node.size() == 4);
  for (const auto& [node, count] : per_node) CHECK(count == 6);
  // Beyond those nodes' room, a rack opens one more node, not several.
  r.count = 36;
  r.pack_last = 36;
  r.existing_per_node = per_node;
  PlacementResult more = Place(nodes, ledger, r, PlacementOptions{});
  REQUIRE(more.placed.size() == 36);
  for (const auto& [node, count] : PerNode(more.placed)) per_node[node] += count;
  // 24 fill the four nodes; the other 12 spread over the racks, opening one node in each.
  CHECK(per_node.size() == 8);
  // The same request spread instead takes every node.
  MemoryLedger spread_ledger;
  CHECK(PerNode(Place(nodes, spread_ledger, Request(60), PlacementOptions{}).placed).size() == 16);
}

TEST_CASE("A sharded replica stays in one NVLink domain unless allowed across") {
  NodeInventory n;
  n.id = "split";
  n.rack = "r";
  n.roles = {cluster::Role::kInference};
  n.gpus = {GpuDevice{40 * kGi, "a"}, GpuDevice{40 * kGi, "b"}};
  PlacementRequest r = Request(1);
  MemoryLedger l1;
  PlacementResult strict = Place({n}, l1, r, {});
  CHECK(strict.placed.empty());
  CHECK(strict.reason.find("too small even when empty") != std::string::npos);
  r.topology.prefer_same_nvlink_domain = false;
  MemoryLedger l2;
  CHECK(Place({n}, l2, r, {}).placed.size() == 1);
}

TEST_CASE("The ledger's reservations are respected") {
  auto nodes = Cluster(1, 1);
  MemoryLedger ledger;
  for (int g = 0; g < 8; ++g) ledger.Reserve(Allocation{"node-000", {g}, 75 * kGi});
  PlacementResult r = Place(nodes, ledger, Request(1), {});
  CHECK(r.placed.empty());
  CHECK(r.reason.find("most free: 5Gi on one GPU, 40Gi in one NVLink domain") != std::string::npos);
  ledger.Release(Allocation{"node-000", {3}, 75 * kGi});
  r = Place(nodes, ledger, Request(1), {});
  REQUIRE(r.placed.size() == 1);
  CHECK(r.placed[0].gpus == std::vector<int>{3});
}

}  // namespace
}  // namespace exa::scheduler
