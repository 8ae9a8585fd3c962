// SiLU-gated product of the LLaMA MLP: out = silu(gate) * up = gate / (1 + exp(-gate)) * up,
// element-wise over [rows, cols] fp32 matrices (out may alias gate or up).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace exa::kernels {

struct SiluMulParams {
  const float* gate = nullptr;  // [rows, cols], row stride `stride` (all three share it)
  const float* up = nullptr;
  float* out = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  absl::Status Validate() const;
};

absl::Status LaunchSiluMul(const SiluMulParams& params, cudaStream_t stream);

}  // namespace exa::kernels
