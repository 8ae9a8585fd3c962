// Residual add and bias add over fp32 [rows, cols] matrices:
//   residual: x[r, c] += y[r, c]
//   bias:     x[r, c] += bias[c]   (bias in its stored dtype, broadcast over rows)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace exa::kernels {

struct AddParams {
  float* x = nullptr;          // [rows, cols], row stride x_stride; updated in place
  const float* y = nullptr;    // [rows, cols], row stride y_stride; null when `bias` is set
  const void* bias = nullptr;  // [cols] in bias_dtype; null when `y` is set
  Dtype bias_dtype = Dtype::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_stride = 0;
  int64_t y_stride = 0;

  absl::Status Validate() const;
};

absl::Status LaunchAdd(const AddParams& params, cudaStream_t stream);

// x[r, c] *= scale (Gemma's embedding scale), then, when softcap > 0,
// x[r, c] = softcap * tanh(x[r, c] / softcap) (Gemma 2's logits).
struct ScaleParams {
  float* x = nullptr;  // [rows, cols], row stride stride; updated in place
  float scale = 1.0f;
  float softcap = 0.0f;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  absl::Status Validate() const;
};

absl::Status LaunchScale(const ScaleParams& params, cudaStream_t stream);

}  // namespace exa::kernels
