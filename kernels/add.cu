#include <algorithm>

#include "kernels/add.h"
#include "kernels/cuda_check.h"
#include "kernels/device_utils.cuh"
#include "kernels/validate.h"

namespace exa::kernels {
namespace {

constexpr int kThreads = 256;

template <typename B>
__global__ void AddKernel(AddParams p) {
  const int64_t n = p.rows * p.cols;
  const B* bias = static_cast<const B*>(p.bias);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / p.cols, c = i % p.cols;
    p.x[r * p.x_stride + c] += bias != nullptr ? device::ToFloat(bias[c]) : p.y[r * p.y_stride + c];
  }
}

__global__ void ScaleKernel(ScaleParams p) {
  const int64_t n = p.rows * p.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float& v = p.x[(i / p.cols) * p.stride + i % p.cols];
    v *= p.scale;
    if (p.softcap > 0.0f) v = p.softcap * tanhf(v / p.softcap);
  }
}

}  // namespace

absl::Status ScaleParams::Validate() const {
  constexpr const char* kOp = "scale";
  EXA_KERNEL_REQUIRE_PTR(x, kOp);
  EXA_KERNEL_REQUIRE(rows >= 1, kOp, "rows", rows, "must be at least 1");
  EXA_KERNEL_REQUIRE(cols >= 1, kOp, "cols", cols, "must be at least 1");
  EXA_KERNEL_REQUIRE(stride >= cols, kOp, "stride", stride, "must be at least cols");
  return absl::OkStatus();
}

absl::Status LaunchScale(const ScaleParams& p, cudaStream_t stream) {
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((p.rows * p.cols + kThreads - 1) / kThreads, 65535));
  ScaleKernel<<<blocks, kThreads, 0, stream>>>(p);
  EXA_CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status AddParams::Validate() const {
  constexpr const char* kOp = "add";
  EXA_KERNEL_REQUIRE_PTR(x, kOp);
  if ((y == nullptr) == (bias == nullptr)) {
    return absl::InvalidArgumentError("add: exactly one of y and bias must be set");
  }
  EXA_KERNEL_REQUIRE(rows >= 1, kOp, "rows", rows, "must be at least 1");
  EXA_KERNEL_REQUIRE(cols >= 1, kOp, "cols", cols, "must be at least 1");
  EXA_KERNEL_REQUIRE(x_stride >= cols, kOp, "x_stride", x_stride, "must be at least cols");
  if (y != nullptr) {
    EXA_KERNEL_REQUIRE(y_stride >= cols, kOp, "y_stride", y_stride, "must be at least cols");
  }
  return absl::OkStatus();
}

absl::Status LaunchAdd(const AddParams& p, cudaStream_t stream) {
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((p.rows * p.cols + kThreads - 1) / kThreads, 65535));
  EXA_CUDA_CHECK(EXA_DISPATCH_DTYPE(p.bias == nullptr ? Dtype::kF32 : p.bias_dtype, B, [&] {
    AddKernel<B><<<blocks, kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }));
  return absl::OkStatus();
}

}  // namespace exa::kernels
