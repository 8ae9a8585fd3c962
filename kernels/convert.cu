#include <algorithm>

#include "kernels/convert.h"
#include "kernels/cuda_check.h"
#include "kernels/device_utils.cuh"
#include "kernels/validate.h"

namespace exa::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void ConvertKernel(ConvertParams p) {
  const int64_t n = p.rows * p.cols;
  T* out = static_cast<T*>(p.out);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = device::FromFloat<T>(p.x[(i / p.cols) * p.x_stride + i % p.cols]);
  }
}

}  // namespace

absl::Status ConvertParams::Validate() const {
  constexpr const char* kOp = "convert";
  EXA_KERNEL_REQUIRE_PTR(x, kOp);
  EXA_KERNEL_REQUIRE_PTR(out, kOp);
  EXA_KERNEL_REQUIRE(rows >= 1, kOp, "rows", rows, "must be at least 1");
  EXA_KERNEL_REQUIRE(cols >= 1, kOp, "cols", cols, "must be at least 1");
  EXA_KERNEL_REQUIRE(x_stride >= cols, kOp, "x_stride", x_stride, "must be at least cols");
  return absl::OkStatus();
}

absl::Status LaunchConvert(const ConvertParams& p, cudaStream_t stream) {
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((p.rows * p.cols + kThreads - 1) / kThreads, 65535));
  EXA_CUDA_CHECK(EXA_DISPATCH_DTYPE(p.out_dtype, T, [&] {
    ConvertKernel<T><<<blocks, kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }));
  return absl::OkStatus();
}

}  // namespace exa::kernels
