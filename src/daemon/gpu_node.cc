#include "daemon/gpu_node.h"

#include <algorithm>
#include <string>

#include "common/logging.h"
#include "common/strings.h"

namespace exa::daemon {

GpuNode PrepareGpus(metrics::Registry& registry) {
  GpuNode node;
  node.inventory = engine::cuda::DiscoverGpus();
  registry.SimpleGauge("exaserve_gpus", "GPUs this node found at start (CUDA runtime + NVML).")
      .Set(static_cast<double>(node.inventory.devices.size()));
  node.burn_in_gauge = &registry.AddGauge(
      "exaserve_gpu_burn_in_passed",
      "1 when the GPU passed its last burn-in (GEMM TFLOP/s and copy bandwidth against its "
      "class), else 0; absent until a burn-in ran.",
      {"device"});
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

bool RunNodeBurnIn(GpuNode& node) {
  node.burn_in.clear();
  node.burn_in_failure.clear();
  if (node.inventory.devices.empty()) return true;
  auto results = engine::cuda::RunBurnIn({});
  auto set = [&](int device, bool passed) {
    if (node.burn_in_gauge != nullptr) {
      node.burn_in_gauge->WithLabels({std::to_string(device)}).Set(passed ? 1 : 0);
    }
  };
  if (!results.ok()) {
    node.burn_in_failure = StrCat("burn-in could not run: ", results.status().message());
    for (const auto& d : node.inventory.devices) set(d.index, false);
  } else {
    node.burn_in = *results;
    for (const auto& r : node.burn_in) {
      set(r.device, r.passed);
      if (!r.passed && node.burn_in_failure.empty()) {
        node.burn_in_failure = StrCat("GPU ", r.device, " (", r.name, "): ", r.reason);
      }
    }
  }
  if (!node.burn_in_failure.empty()) {
    EXA_LOG_ERROR("node", "GPU burn-in failed: the node is tainted and starts no replica",
                  {{"taint", kBurnInFailedTaint}, {"reason", node.burn_in_failure}});
    return false;
  }
  for (const auto& r : node.burn_in) {
    EXA_LOG_INFO("node", "GPU burn-in passed",
                 {{"device", r.device},
                  {"gemm_tflops", r.gemm_tflops},
                  {"copy_gb_per_s", r.copy_bytes_per_s / 1e9}});
  }
  return true;
}

nlohmann::json BurnInJson(const GpuNode& node) {
  return {{"inventory", engine::cuda::ToJson(node.inventory)},
          {"burn_in", engine::cuda::ToJson(node.burn_in)},
          {"passed", node.burn_in_failure.empty()},
          {"failure", node.burn_in_failure}};
}

void PublishGpus(const GpuNode& node, membership::Metadata* metadata) {
  auto& taints = metadata->taints;
  taints.erase(std::remove(taints.begin(), taints.end(), kBurnInFailedTaint), taints.end());
  if (!node.burn_in_failure.empty()) taints.push_back(kBurnInFailedTaint);
  const engine::cuda::GpuInventory& inventory = node.inventory;
  if (inventory.devices.empty()) return;
  // "nvl<N>": device 0's NVLink group holds N GPUs (what a replica spanning GPUs can use);
  // empty without NVLink.
  const int domain = inventory.devices.front().nvlink_domain;
  if (domain >= 0) {
    const auto size = std::count_if(inventory.devices.begin(), inventory.devices.end(),
                                    [&](const auto& d) { return d.nvlink_domain == domain; });
    metadata->nvlink_domain = StrCat("nvl", size);
  }
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
