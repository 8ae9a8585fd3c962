// The parts of gpu.h that need no CUDA: the device classes and the JSON forms.
#include "engine/cuda/gpu.h"

namespace exa::engine::cuda {

DeviceClass ExpectedClass(const std::string& name, int64_t memory_bytes) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  constexpr double kT = 1e12;
  // Datasheet dense bf16 TFLOP/s and HBM bandwidth (NVIDIA H200, H100, A100, L40S data sheets);
  // floors at ~60% of each. The datasheet bandwidth is the memory bus's total, reads and writes
  // together, which is what the copy test counts: a healthy H200 copies ~4.25 TB/s read + written
  // (89% of 4.8; measured by `exaserved --burn-in`, 2026-11-29), not twice the datasheet figure.
  if (has("H200")) return {"H200", 550, 0.6 * 4.8 * kT};
  if (has("H100") && (has("PCIe") || has("PCIE"))) return {"H100-PCIe", 450, 0.6 * 2.0 * kT};
  if (has("H100") && has("NVL")) return {"H100-NVL", 500, 0.6 * 3.9 * kT};
  if (has("H100")) return {"H100-SXM", 550, 0.6 * 3.35 * kT};
  if (has("A100") && memory_bytes > (int64_t{60} << 30)) return {"A100-80GB", 180, 0.6 * 1.9 * kT};
  if (has("A100")) return {"A100-40GB", 180, 0.6 * 1.5 * kT};
  if (has("L40S")) return {"L40S", 200, 0.6 * 0.864 * kT};
  return {"unknown", 0, 0};
}

nlohmann::json ToJson(const GpuInventory& inv) {
  nlohmann::json devices = nlohmann::json::array();
  for (const GpuDevice& d : inv.devices) {
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"uuid", d.uuid},
                       {"pci_bus_id", d.pci_bus_id},
                       {"memory_bytes", d.memory_bytes},
                       {"compute_capability",
                        std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor)},
                       {"multiprocessors", d.multiprocessors},
                       {"nvlink_peers", d.nvlink_peers},
                       {"nvlink_domain", d.nvlink_domain}});
  }
  return {{"count", inv.devices.size()},
          {"devices", devices},
          {"driver_version", inv.driver_version},
          {"note", inv.note}};
}

nlohmann::json ToJson(const std::vector<WarmUpTiming>& timings) {
  nlohmann::json out = nlohmann::json::array();
  for (const WarmUpTiming& t : timings) {
    out.push_back({{"device", t.device},
                   {"context_ms", t.context_ms},
                   {"noop_kernel_ms", t.noop_kernel_ms},
                   {"cublas_ms", t.cublas_ms},
                   {"total_ms", t.total_ms}});
  }
  return out;
}

nlohmann::json ToJson(const std::vector<BurnInResult>& results) {
  nlohmann::json out = nlohmann::json::array();
  for (const BurnInResult& r : results) {
    out.push_back({{"device", r.device},
                   {"name", r.name},
                   {"class", r.expected.name},
                   {"gemm_tflops", r.gemm_tflops},
                   {"min_gemm_tflops", r.expected.min_gemm_tflops},
                   {"copy_bytes_per_s", r.copy_bytes_per_s},
                   {"min_copy_bytes_per_s", r.expected.min_copy_bytes_per_s},
                   {"passed", r.passed},
                   {"reason", r.reason}});
  }
  return out;
}

}  // namespace exa::engine::cuda
