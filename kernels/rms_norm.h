// RMSNorm: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, per row. One block per
// row; the sum of squares is accumulated in fp32 (the CPU backend uses double; the difference is
// far below bf16 resolution).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace exa::kernels {

struct RmsNormParams {
  const float* x = nullptr;      // [rows, cols] fp32, row stride x_stride
  const void* weight = nullptr;  // [cols] in weight_dtype
  float* out = nullptr;          // [rows, cols] fp32, row stride out_stride; may alias x
  Dtype weight_dtype = Dtype::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_stride = 0;
  int64_t out_stride = 0;
  float eps = 1e-6f;

  absl::Status Validate() const;
};

absl::Status LaunchRmsNorm(const RmsNormParams& params, cudaStream_t stream);

}  // namespace exa::kernels
