#include "kernels/cuda_check.h"
#include "kernels/device_utils.cuh"
#include "kernels/embedding.h"
#include "kernels/validate.h"

namespace exa::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void EmbeddingKernel(EmbeddingParams p) {
  const T* row = static_cast<const T*>(p.table) + p.ids[blockIdx.x] * p.table_stride;
  float* out = p.out + blockIdx.x * p.out_stride;
#pragma unroll 4  // a decode step gathers one row: its loads go out together
  for (int64_t c = threadIdx.x; c < p.cols; c += blockDim.x) out[c] = device::ToFloat(row[c]);
}

}  // namespace

absl::Status EmbeddingParams::Validate() const {
  constexpr const char* kOp = "embedding";
  EXA_KERNEL_REQUIRE_PTR(table, kOp);
  EXA_KERNEL_REQUIRE_PTR(ids, kOp);
  EXA_KERNEL_REQUIRE_PTR(out, kOp);
  EXA_KERNEL_REQUIRE(count >= 1 && count < (int64_t{1} << 31), kOp, "count", count,
                     "must be in [1, 2^31)");
  EXA_KERNEL_REQUIRE(table_rows >= 1, kOp, "table_rows", table_rows, "must be at least 1");
  EXA_KERNEL_REQUIRE(cols >= 1, kOp, "cols", cols, "must be at least 1");
  EXA_KERNEL_REQUIRE(table_stride >= cols, kOp, "table_stride", table_stride,
                     "must be at least cols");
  EXA_KERNEL_REQUIRE(out_stride >= cols, kOp, "out_stride", out_stride, "must be at least cols");
  return absl::OkStatus();
}

absl::Status LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  EXA_CUDA_CHECK(EXA_DISPATCH_DTYPE(p.table_dtype, T, [&] {
    EmbeddingKernel<T><<<static_cast<unsigned>(p.count), kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }));
  return absl::OkStatus();
}

}  // namespace exa::kernels
