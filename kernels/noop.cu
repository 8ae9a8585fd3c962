#include "kernels/cuda_check.h"
#include "kernels/noop.h"

namespace exa::kernels {
namespace {

__global__ void NoopKernel() {}

}  // namespace

absl::Status LaunchNoop(cudaStream_t stream) {
  NoopKernel<<<1, 1, 0, stream>>>();
  EXA_CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace exa::kernels
