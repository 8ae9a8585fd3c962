// Step timing for the sim backend: how long a real replica would take for a batch, so routing
// and scale tests (exaserve-sim) see realistic queueing without GPUs or weights.
//
// Defaults: a 13B FP16 model (Llama-2-13B) on one A100-80GB, from published measurements:
//  - decode is bandwidth-bound: 26 GB of weights at ~1.5-1.6 TB/s effective HBM bandwidth is
//    ~17 ms; vLLM/TGI report 20-25 ms per token at batch 1 for 13B on A100, so 20 ms base;
//  - each extra sequence in the decode batch adds KV reads and GEMM work: ~0.1 ms per sequence
//    (batch 32 decodes at ~24 ms/step in the vLLM paper's Fig. 12 setting);
//  - attention reads 0.8 MB of KV per context token (docs/architecture.md#memory-arithmetic) at
//  ~1.5 TB/s: ~0.5 µs per
//    context token in the batch;
//  - prefill is compute-bound: 2 x 13e9 FLOP per token at ~200 TFLOPS effective (of 312 dense
//    FP16) is ~0.13 ms, and measured TTFT for a 1k-token prompt is ~130-150 ms: 0.13 ms per token.
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace exa::engine {

struct SimCostModel {
  double decode_base_ms = 20.0;
  double decode_per_sequence_ms = 0.1;
  double decode_per_context_token_us = 0.5;
  double prefill_per_token_us = 130.0;
  int32_t vocab_size = 32000;
  int32_t max_context = 4096;
  int32_t kv_bytes_per_token = 819200;  // 0.8 MB (docs/architecture.md#memory-arithmetic)
  int64_t weight_bytes = int64_t{26} * 1000 * 1000 * 1000;
  // Test hook (a hung step loop): while this file exists, every step blocks. Empty: off.
  std::string stall_file;
  // Test hook (a release that fails requests): every this-many-th step fails, and with it every
  // request in its batch (FinishReason::kError). 0: off.
  int64_t fail_every_steps = 0;
  // Test hook (a release that leaks memory, docs/architecture.md#leak-detection): every step keeps
  // this many more bytes for good (really allocated and touched, up to 1 GiB). 0: off.
  int64_t leak_bytes_per_step = 0;

  // Modeled duration of one step with `prefill_tokens`, `decode_sequences` and the summed
  // context of everything in the batch.
  absl::Duration StepTime(int64_t prefill_tokens, int64_t decode_sequences,
                          int64_t context_tokens) const {
    double ms = prefill_tokens * prefill_per_token_us / 1000.0;
    if (decode_sequences > 0) ms += decode_base_ms + decode_sequences * decode_per_sequence_ms;
    ms += context_tokens * decode_per_context_token_us / 1000.0;
    return absl::Microseconds(static_cast<int64_t>(ms * 1000.0));
  }
};

}  // namespace exa::engine
