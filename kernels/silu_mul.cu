#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/silu_mul.h"
#include "kernels/validate.h"

namespace exa::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void SiluMulKernel(SiluMulParams p) {
  const int64_t n = p.rows * p.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t at = (i / p.cols) * p.stride + i % p.cols;
    const float g = p.gate[at];
    const float u = p.gelu_tanh ? g * (1.5957691216057308f + 0.07135481627260025f * g * g) : g;
    p.out[at] = g / (1.0f + expf(-u)) * p.up[at];
  }
}

}  // namespace

absl::Status SiluMulParams::Validate() const {
  constexpr const char* kOp = "silu_mul";
  EXA_KERNEL_REQUIRE_PTR(gate, kOp);
  EXA_KERNEL_REQUIRE_PTR(up, kOp);
  EXA_KERNEL_REQUIRE_PTR(out, kOp);
  EXA_KERNEL_REQUIRE(rows >= 1, kOp, "rows", rows, "must be at least 1");
  EXA_KERNEL_REQUIRE(cols >= 1, kOp, "cols", cols, "must be at least 1");
  EXA_KERNEL_REQUIRE(stride >= cols, kOp, "stride", stride, "must be at least cols");
  return absl::OkStatus();
}

absl::Status LaunchSiluMul(const SiluMulParams& p, cudaStream_t stream) {
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  const int64_t blocks = std::min<int64_t>((p.rows * p.cols + kThreads - 1) / kThreads, 65535);
  SiluMulKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  EXA_CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace exa::kernels
