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

}  // namespace
}  // namespace exa::scheduler
