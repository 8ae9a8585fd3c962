#include "daemon/gpu_node.h"

#include <algorithm>
#include <string>

#include "common/logging.h"

namespace exa::daemon {

GpuNode PrepareGpus(metrics::Registry& registry) {
  GpuNode node;
  node.inventory = engine::cuda::DiscoverGpus();
  registry.SimpleGauge("exaserve_gpus", "GPUs this node found at start (CUDA runtime + NVML).")
      .Set(static_cast<double>(node.inventory.devices.size()));
  if (node.inventory.devices.empty()) {
    EXA_LOG_INFO("node", "no GPU", {{"reason", node.inventory.note}});
    return node;
  }
  auto timings = engine::cuda::WarmUpGpus();
  if (!timings.ok()) {
    node.warm_up = timings.status();
    EXA_LOG_ERROR("node", "GPU warm-up failed", {{"error", std::string(node.warm_up.message())}});
    return node;
  }
  auto& gauge = registry.AddGauge(
      "exaserve_gpu_warm_up_seconds",
      "CUDA context, no-op kernel and cuBLAS handle creation at node start, per device.",
      {"device"});
  for (const auto& t : *timings) {
    gauge.WithLabels({std::to_string(t.device)}).Set(t.total_ms / 1e3);
    EXA_LOG_INFO("node", "GPU warmed up",
                 {{"device", t.device},
                  {"context_ms", t.context_ms},
                  {"noop_kernel_ms", t.noop_kernel_ms},
                  {"cublas_ms", t.cublas_ms}});
  }
  return node;
}

void PublishGpus(const engine::cuda::GpuInventory& inventory, membership::Metadata* metadata) {
  if (inventory.devices.empty()) return;
  int64_t smallest = inventory.devices.front().memory_bytes;
  for (const auto& d : inventory.devices) smallest = std::min(smallest, d.memory_bytes);
  const auto& first = inventory.devices.front();
  std::string model = engine::cuda::ExpectedClass(first.name, first.memory_bytes).name;
  if (model == "unknown") model = first.name;
  metadata->gpus.count = static_cast<uint16_t>(std::min<size_t>(inventory.devices.size(), 0xffff));
  metadata->gpus.memory_mib_each = static_cast<uint32_t>(smallest >> 20);
  metadata->gpus.model = model.substr(0, 32);
}

}  // namespace exa::daemon
