// Narrows fp32 activations to the half type of a weight before a cuBLAS GEMM (cuBLAS multiplies
// bf16 x bf16 or fp16 x fp16 with fp32 accumulation and output; it has no fp32 x bf16 mode):
// out[r, c] = round_to_nearest_even(x[r, c]).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace exa::kernels {

struct ConvertParams {
  const float* x = nullptr;  // [rows, cols] fp32, row stride x_stride
  void* out = nullptr;       // [rows, cols] in out_dtype, dense (row stride cols)
  Dtype out_dtype = Dtype::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_stride = 0;

  absl::Status Validate() const;
};

absl::Status LaunchConvert(const ConvertParams& params, cudaStream_t stream);

}  // namespace exa::kernels
