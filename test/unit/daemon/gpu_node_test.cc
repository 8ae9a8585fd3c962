// The GPU hook of the daemon: the inventory becomes the gossip metadata the scheduler places by,
// and a node without GPUs publishes none and still starts.
#include <catch2/catch.hpp>

#include "daemon/gpu_node.h"

namespace exa::daemon {
namespace {

TEST_CASE("a GPU inventory is summarised into the gossip metadata", "[daemon][gpu]") {
  GpuNode node;
  engine::cuda::GpuInventory& inv = node.inventory;
  for (int i = 0; i < 8; ++i) {
    engine::cuda::GpuDevice d;
    d.index = i;
    d.name = "NVIDIA H100 80GB HBM3";
    d.memory_bytes = (i == 3 ? int64_t{79} : int64_t{80}) << 30;
    inv.devices.push_back(d);
  }
  membership::Metadata m;
  PublishGpus(node, &m);
  CHECK(m.gpus.count == 8);
  CHECK(m.gpus.memory_mib_each == 79 * 1024);  // the smallest device bounds placement
  CHECK(m.gpus.model == "H100-SXM");
  CHECK(m.nvlink_domain.empty());  // NVML reported no NVLink
  CHECK(m.taints.empty());

  // GPUs 0-3 in one NVLink group, 4-7 in another: device 0's group has 4.
  for (int i = 0; i < 8; ++i) inv.devices[i].nvlink_domain = i < 4 ? 0 : 4;
  PublishGpus(node, &m);
  CHECK(m.nvlink_domain == "nvl4");

  // A failed burn-in taints the node; the next pass lifts the taint, other taints stay.
  m.taints = {"cordoned"};
  node.burn_in_failure = "GPU 3 (NVIDIA H100 80GB HBM3): copy bandwidth below the floor";
  PublishGpus(node, &m);
  CHECK(m.taints == std::vector<std::string>{"cordoned", kBurnInFailedTaint});
  PublishGpus(node, &m);  // idempotent
  CHECK(m.taints == std::vector<std::string>{"cordoned", kBurnInFailedTaint});
  node.burn_in_failure.clear();
  PublishGpus(node, &m);
  CHECK(m.taints == std::vector<std::string>{"cordoned"});
  auto json = BurnInJson(node);
  CHECK(json["passed"] == true);

  inv.devices.resize(1);
  inv.devices[0].name = "A GPU with a very long name that does not fit in the metadata budget";
  PublishGpus(node, &m);
  CHECK(m.gpus.count == 1);
  CHECK(m.gpus.model.size() == 32);
}

TEST_CASE("no GPUs: nothing published, a metric of zero, no failure", "[daemon][gpu]") {
  membership::Metadata m;
  PublishGpus(GpuNode{}, &m);
  CHECK(m.gpus == membership::GpuSummary{});
  metrics::Registry registry;
  GpuNode node = PrepareGpus(registry);
  if (node.inventory.devices.empty()) {
    CHECK(node.warm_up.ok());
    CHECK(registry.Expose().find("exaserve_gpus 0") != std::string::npos);
    // Nothing to burn in: passes trivially, no taint; and again (exaserve-cli node burn-in).
    CHECK(RunNodeBurnIn(node));
    CHECK(RunNodeBurnIn(node));
    PublishGpus(node, &m);
    CHECK(m.taints.empty());
  }
}

}  // namespace
}  // namespace exa::daemon
