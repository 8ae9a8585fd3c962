// Matrix-vector products for decode-sized batches: out[r, n] = sum_k x[r, k] * w[n, k] for up to
// kGemvMaxRows rows of fp32 activations against half-precision (bf16 / fp16) weights, fp32
// accumulation and output. A decode step at batch 1 reads every weight once and does ~1 FLOP per
// byte: the product is bound by memory bandwidth, where cuBLAS's GEMM kernels for M = 1 leave a
// third of it unused (an H200 measured 1.8 TB/s for a 4096 x 4096 bf16 product,
// `exaserve-bench engine --backend cuda` "gemm"), and the activations do not need narrowing to
// the weights' type first (no convert launch, no bf16 rounding of x).
//
// One warp per weight row, 16-byte loads of the weights, the x rows read through the cache. Up to
// kGemvMaxTargets products of the same x (q/k/v, gate/up) run as one launch: small matrices
// (k/v projections) alone leave the GPU idle between launches.
// Requirements: k a multiple of 8 and 16-byte aligned rows (every checkpoint's linear layers).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace exa::kernels {

inline constexpr int64_t kGemvMaxRows = 4;
inline constexpr int kGemvMaxTargets = 3;

// One product: out[r, i] = sum_k x[r, k] * w[i, k].
struct GemvTarget {
  const void* w = nullptr;  // [n, k] in GemvParams::w_dtype, row-major, dense, 16-byte aligned
  float* out = nullptr;     // [rows, n] fp32, row stride out_stride
  int64_t n = 0;
  int64_t out_stride = 0;
};

struct GemvParams {
  GemvTarget targets[kGemvMaxTargets];
  int32_t num_targets = 1;
  Dtype w_dtype = Dtype::kBF16;  // every target's (bf16 or fp16)
  const float* x = nullptr;      // [rows, k] fp32, row stride x_stride (16-byte aligned rows)
  int64_t rows = 0;              // 1 .. kGemvMaxRows
  int64_t k = 0;                 // a multiple of 8
  int64_t x_stride = 0;          // a multiple of 4
  bool accumulate = false;       // out += product (a residual connection) instead of out =

  // INVALID_ARGUMENT naming the field that rules the product out: callers with another path
  // (cuBLAS through kernels/gemm.h) take it when this fails.
  absl::Status Validate() const;
};

absl::Status LaunchGemv(const GemvParams& params, cudaStream_t stream);

}  // namespace exa::kernels
