// Gated product of the MLP, element-wise over [rows, cols] fp32 matrices (out may alias gate or
// up): out = silu(gate) * up = gate / (1 + exp(-gate)) * up (Llama), or with `gelu_tanh`
// out = gelu_tanh(gate) * up = gate / (1 + exp(-gate (a + b gate^2))) * up, a = 2 sqrt(2/pi),
// b = 0.044715 a (Gemma: GELU's tanh approximation, 0.5 g (1 + tanh(a/2 (g + 0.044715 g^3)))).
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
  bool gelu_tanh = false;

  absl::Status Validate() const;
};

absl::Status LaunchSiluMul(const SiluMulParams& params, cudaStream_t stream);

}  // namespace exa::kernels
