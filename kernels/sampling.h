// Token selection on the device, one thread block per row of logits: temperature, top-k, top-p,
// then one draw from a caller-supplied uniform number (so a seeded request stays reproducible:
// the host's seeded Random draws u, the device turns it into a token). Temperature 0 is greedy
// (argmax, the lowest id on ties, as engine/sampler.cc).
//
// Semantics (Hugging Face's order): z = logits / temperature; top-k keeps the tokens whose z is
// at least the k-th largest; top-p then keeps the smallest set of the most likely remaining
// tokens whose probability mass reaches top_p (ties at the boundary are kept); the draw walks the
// kept tokens in id order until the running mass exceeds u * kept mass. Thresholds are found by
// an exact radix select over the fp32 bit patterns (32 counting passes), so no sort and no
// per-row scratch memory. Repetition penalty and log-probabilities stay on the host sampler.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace exa::kernels {

struct SamplingParams {
  const float* logits = nullptr;       // [rows, vocab] fp32, row stride logits_stride
  int32_t* tokens = nullptr;           // [rows] device: the chosen ids
  const float* temperature = nullptr;  // [rows] device: 0 = greedy
  const int32_t* top_k = nullptr;      // [rows] device: 0 = off
  const float* top_p = nullptr;        // [rows] device: 1 = off, in (0, 1]
  const float* uniform = nullptr;      // [rows] device: a draw in [0, 1)
  int32_t rows = 0;
  int32_t vocab = 0;
  int64_t logits_stride = 0;

  absl::Status Validate() const;
};

absl::Status LaunchSampling(const SamplingParams& params, cudaStream_t stream);

}  // namespace exa::kernels
