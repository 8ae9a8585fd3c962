// Rotary position embedding (Hugging Face rotate_half convention), in place on q and k: for each
// token t and each head, pairs (v[i], v[i + head_dim/2]) rotate by angle positions[t] *
// inv_freq[i], the angle computed in fp32 like PyTorch. Llama 3 frequency scaling is carried by
// inv_freq (engine/model.h RopeInverseFrequencies computes it once on the host), so scaled and
// plain RoPE are the same kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace exa::kernels {

struct RopeParams {
  float* q = nullptr;                  // [tokens, q_heads * head_dim] fp32, row stride q_stride
  float* k = nullptr;                  // [tokens, k_heads * head_dim] fp32, row stride k_stride
  const int32_t* positions = nullptr;  // [tokens] device
  const float* inv_freq = nullptr;     // [head_dim / 2] device
  int64_t tokens = 0;
  int32_t q_heads = 0;
  int32_t k_heads = 0;
  int32_t head_dim = 0;  // even
  int64_t q_stride = 0;
  int64_t k_stride = 0;

  absl::Status Validate() const;
};

absl::Status LaunchRope(const RopeParams& params, cudaStream_t stream);

}  // namespace exa::kernels
