// The membership view becomes the reconciler's node inputs; a gossiped summary that contradicts
// itself is refused by placement, never trusted.
#include <catch2/catch.hpp>

#include "scheduler/node_view.h"

namespace exa::scheduler {
namespace {

membership::Member GpuMember() {
  membership::Member m;
  m.id = "gpu-1";
  m.state = membership::MemberState::kSuspect;
  m.state_changed = absl::FromUnixSeconds(100);
  m.metadata.rack = "rack-3";
  m.metadata.nvlink_domain = "nvl-a";
  m.metadata.roles = {"inference"};
  m.metadata.gpus = membership::GpuSummary{8, 81920, "H100-SXM"};
  m.metadata.taints = {"burn-in-failed"};
  return m;
}

TEST_CASE("A member's metadata and state become inventory and liveness") {
  NodeStatus st;
  st.reported = true;
  st.boot_id = 7;
  UpdateFromMember(GpuMember(), st);
  CHECK(st.inventory.id == "gpu-1");
  CHECK(st.inventory.rack == "rack-3");
  REQUIRE(st.inventory.gpus.size() == 8);
  CHECK(st.inventory.gpus[0].memory_bytes == uint64_t{80} << 30);
  CHECK(st.inventory.gpus[7].nvlink_domain == "nvl-a");
  CHECK(st.inventory.taints == std::vector<std::string>{"burn-in-failed"});
  CHECK(st.liveness == NodeLiveness::kSuspect);
  CHECK(st.liveness_since == absl::FromUnixSeconds(100));
  CHECK(st.boot_id == 7);  // the report is kept
}

TEST_CASE("A GPU summary without memory is an inconsistent inventory") {
  membership::Member m = GpuMember();
  m.metadata.gpus.memory_mib_each = 0;
  absl::Status s = ValidateInventory(InventoryFromMember(m));
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message().find("gpu-1 GPU 0 reports 0") != absl::string_view::npos);
}

TEST_CASE("A dead node reaped from the SWIM view is remembered, dead since it died") {
  std::map<std::string, NodeStatus> nodes;
  membership::Member m = GpuMember();
  m.state = membership::MemberState::kDead;
  m.state_changed = absl::FromUnixSeconds(100);
  MergeView(absl::FromUnixSeconds(101), {m}, nodes);
  nodes["gpu-1"].reported = true;
  nodes["gpu-1"].replicas.push_back(ReplicaRecord{"llama", 3, 7});
  // 30 s later SWIM has reaped it: the view no longer lists it.
  MergeView(absl::FromUnixSeconds(135), {}, nodes);
  REQUIRE(nodes.count("gpu-1"));
  CHECK(nodes["gpu-1"].liveness == NodeLiveness::kDead);
  CHECK(nodes["gpu-1"].liveness_since == absl::FromUnixSeconds(100));
  CHECK(nodes["gpu-1"].replicas.front().generation == 7);
  MergeView(absl::FromUnixSeconds(100) + kForgetDeadAfter + absl::Seconds(1), {}, nodes);
  CHECK_FALSE(nodes.count("gpu-1"));
}

TEST_CASE("A live node missing from the view counts as dead from then") {
  std::map<std::string, NodeStatus> nodes;
  membership::Member m = GpuMember();
  m.state = membership::MemberState::kAlive;
  MergeView(absl::FromUnixSeconds(100), {m}, nodes);
  MergeView(absl::FromUnixSeconds(200), {}, nodes);
  CHECK(nodes["gpu-1"].liveness == NodeLiveness::kDead);
  CHECK(nodes["gpu-1"].liveness_since == absl::FromUnixSeconds(200));
}

}  // namespace
}  // namespace exa::scheduler

namespace exa::scheduler {
namespace {

TEST_CASE("A node offering its host memory as a cpu device is a cpu node") {
  membership::Member m = GpuMember();
  m.metadata.gpus = membership::GpuSummary{1, 4096, std::string(kCpuDeviceModel)};
  NodeInventory inv = InventoryFromMember(m);
  CHECK(inv.device_kind == "cpu");
  REQUIRE(inv.gpus.size() == 1);
  CHECK(inv.gpus[0].memory_bytes == uint64_t{4} << 30);
  CHECK(InventoryFromMember(GpuMember()).device_kind == "gpu");
}

}  // namespace
}  // namespace exa::scheduler
