// Node-level GPU functions the daemon calls (docs/architecture.md#cold-start and
// docs/architecture.md#bring-up): the inventory published in the node's metadata, context warm-up
// at start, the burn-in that decides whether the node may host replicas, and the device
// measurements `exaserve-bench engine --backend cuda` reports.
//
// Plain C++ (no CUDA types), so callers need no CUDA headers. In a build without CUDA (or on a
// machine without a driver) the inventory is empty with a note saying why, and the rest return
// FAILED_PRECONDITION: never a crash.
//
// Thread safety: every function may be called from any thread; they create and destroy their own
// streams and buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exa::engine::cuda {

struct GpuDevice {
  int index = 0;  // CUDA device index
  std::string name;
  std::string uuid;        // NVML, when the library is present
  std::string pci_bus_id;  // "0000:1B:00.0"
  int64_t memory_bytes = 0;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  std::vector<int> nvlink_peers;  // CUDA indices reachable over an active NVLink (NVML)
  int nvlink_domain = -1;  // lowest index of its NVLink-connected group on this node; -1: none
};

struct GpuInventory {
  std::vector<GpuDevice> devices;
  std::string driver_version;  // "12.8" (the CUDA version the driver supports)
  std::string note;            // why the inventory is empty, or what is missing (e.g. NVML)
};

// Never fails: no driver, no device or a build without CUDA give an empty inventory and a note.
GpuInventory DiscoverGpus();
nlohmann::json ToJson(const GpuInventory& inventory);

// Memory in use on each device of `inventory` as the driver sees it (every process's, not only
// this node's replicas), through NVML: what the GPU-memory alert compares with the total
// (docs/architecture.md#monitoring-and-alerts). FAILED_PRECONDITION without NVML (or CUDA); a
// device NVML cannot read is left out.
struct GpuMemoryUse {
  int index = 0;  // CUDA device index
  int64_t used_bytes = 0;
  int64_t total_bytes = 0;
};
absl::StatusOr<std::vector<GpuMemoryUse>> ReadGpuMemory(const GpuInventory& inventory);

// Context creation, a no-op kernel and a cuBLAS handle on every device, timed
// (docs/architecture.md#cold-start: context warm-up at node start, so the first request pays none
// of it).
struct WarmUpTiming {
  int device = 0;
  double context_ms = 0;
  double noop_kernel_ms = 0;
  double cublas_ms = 0;
  double total_ms = 0;
};
absl::StatusOr<std::vector<WarmUpTiming>> WarmUpGpus();
nlohmann::json ToJson(const std::vector<WarmUpTiming>& timings);

// The class a device is compared against in burn-in: conservative floors (about 60% of the
// datasheet dense bf16 TFLOP/s and 60-70% of the HBM bandwidth, read + write), so a healthy
// device passes with margin and a throttled or faulty one does not.
struct DeviceClass {
  std::string name;  // "H100-SXM", ... or "unknown"
  double min_gemm_tflops = 0;
  double min_copy_bytes_per_s = 0;
};
// Pure: picks the class from the CUDA device name and memory size.
DeviceClass ExpectedClass(const std::string& device_name, int64_t memory_bytes);

struct BurnInOptions {
  int32_t gemm_size = 8192;  // m = n = k of the bf16 GEMM
  int32_t gemm_iterations = 20;
  int64_t copy_bytes = int64_t{1} << 30;
  int32_t copy_iterations = 10;
};

struct BurnInResult {
  int device = 0;
  std::string name;
  DeviceClass expected;
  double gemm_tflops = 0;
  double copy_bytes_per_s = 0;  // device-to-device copy, bytes read + written per second
  bool passed = false;
  std::string reason;  // why it failed (or "no expected figures for this device")
};
// Runs the GEMM and copy tests on every device. FAILED_PRECONDITION without a device.
absl::StatusOr<std::vector<BurnInResult>> RunBurnIn(const BurnInOptions& options);
nlohmann::json ToJson(const std::vector<BurnInResult>& results);

// Device-to-device copy bandwidth of GPU `device` over `bytes`-sized buffers, best of a few runs,
// in bytes read + written per second (the CPU benchmark's convention).
absl::StatusOr<double> MeasureDeviceCopyBandwidth(int device, int64_t bytes);

// One bf16 linear layer through cuBLAS (kernels::Gemm) and, for up to 4 rows, the GEMV
// (kernels/gemv.h): out[rows, n] = x[rows, k] w[n, k]^T, fp32 out. Returns {"rows", "n", "k", "us",
// "weight_bytes_per_s", "tflops"}; weight_bytes_per_s counts the weight matrix read once.
absl::StatusOr<nlohmann::json> MeasureGemm(int device, int64_t rows, int64_t n, int64_t k);

// The paged-attention kernel alone on a decode step: `batch` sequences of `context` cached
// tokens, bf16 cache. Returns {"context", "batch", "seconds", "kv_bytes", "bytes_per_s"} where
// bytes_per_s counts the K and V bytes the step must read.
absl::StatusOr<nlohmann::json> MeasurePagedAttentionDecode(int device, int32_t context,
                                                           int32_t batch, int32_t num_heads,
                                                           int32_t num_kv_heads, int32_t head_dim);

}  // namespace exa::engine::cuda
