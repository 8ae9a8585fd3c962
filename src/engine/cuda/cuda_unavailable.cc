// The CUDA entry points in a build without CUDA (EXASERVE_CUDA=OFF or no nvcc): the same
// contracts, answering that the backend is not built. Compiled instead of the CUDA sources.
#include "absl/status/status.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/gpu.h"

namespace exa::engine::cuda {
namespace {

absl::Status NotBuilt() {
  return absl::FailedPreconditionError(
      "backend cuda: this binary was built without CUDA (configure with -DEXASERVE_CUDA=ON on a "
      "machine with the CUDA toolkit)");
}

}  // namespace

bool CudaBuilt() { return false; }

absl::StatusOr<std::unique_ptr<Engine>> CreateCudaEngine(const EngineOptions&,
                                                         std::shared_ptr<const Detokenizer>) {
  return NotBuilt();
}

GpuInventory DiscoverGpus() {
  GpuInventory inv;
  inv.note = "built without CUDA";
  return inv;
}

absl::StatusOr<std::vector<GpuMemoryUse>> ReadGpuMemory(const GpuInventory&) { return NotBuilt(); }
absl::StatusOr<std::vector<WarmUpTiming>> WarmUpGpus() { return NotBuilt(); }
absl::StatusOr<std::vector<BurnInResult>> RunBurnIn(const BurnInOptions&) { return NotBuilt(); }
absl::StatusOr<double> MeasureDeviceCopyBandwidth(int, int64_t) { return NotBuilt(); }
absl::StatusOr<nlohmann::json> MeasureGemm(int, int64_t, int64_t, int64_t) { return NotBuilt(); }
absl::StatusOr<nlohmann::json> MeasurePagedAttentionDecode(int, int32_t, int32_t, int32_t, int32_t,
                                                           int32_t) {
  return NotBuilt();
}

}  // namespace exa::engine::cuda
