// The GPU hook of the daemon: the inventory becomes the gossip metadata the scheduler places by,
// and a node without GPUs publishes none and still starts.
#include <catch2/catch.hpp>

#include "daemon/gpu_node.h"

namespace exa::daemon {
namespace {

TEST_CASE("a GPU inventory is summarised into the gossip metadata", "[daemon][gpu]") {
  engine::cuda::GpuInventory inv;
  for (int i = 0; i < 8; ++i) {
    engine::cuda::GpuDevice d;
    d.index = i;
    d.name = "NVIDIA H100 80GB HBM3";
    d.memory_bytes = (i == 3 ? int64_t{79} : int64_t{80}) << 30;
    inv.devices.push_back(d);
  }
  membership::Metadata m;
  PublishGpus(inv, &m);
  CHECK(m.gpus.count == 8);
  CHECK(m.gpus.memory_mib_each == 79 * 1024);  // the smallest device bounds placement
  CHECK(m.gpus.model == "H100-SXM");

  inv.devices.resize(1);
  inv.devices[0].name = "A GPU with a very long name that does not fit in the metadata budget";
  PublishGpus(inv, &m);
  CHECK(m.gpus.count == 1);
  CHECK(m.gpus.model.size() == 32);
}

TEST_CASE("no GPUs: nothing published, a metric of zero, no failure", "[daemon][gpu]") {
  membership::Metadata m;
  PublishGpus({}, &m);
  CHECK(m.gpus == membership::GpuSummary{});
  metrics::Registry registry;
  GpuNode node = PrepareGpus(registry);
  if (node.inventory.devices.empty()) {
    CHECK(node.warm_up.ok());
    CHECK(registry.Expose().find("exaserve_gpus 0") != std::string::npos);
  }
}

}  // namespace
}  // namespace exa::daemon
