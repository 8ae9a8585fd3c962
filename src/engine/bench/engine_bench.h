// The engine benchmark behind `exaserve-bench engine`: prefill and decode throughput of one
// replica on this machine, compared with the memory bandwidth measured in the same run
// (docs/testing.md: a benchmark prints JSON against a baseline from the same run), and optionally
// the bundled model's exact-match rate on its held-out sums.
//
// Output fields (after one untimed warm-up prefill; each throughput the best of `repeats`
// rounds, with the median beside it as tokens_per_s_median): prefill[] with tokens_per_s per
// prompt length (128 and 512 by default); decode[] with tokens_per_s per batch size (1, 8, 32 by
// default); cpu_isa, the kernel path the CPU backend used (docs/architecture.md#cpu-backend);
// cpu_bf16_activations (EngineOptions::cpu_bf16_activations); memcpy_bandwidth_bytes_per_s (STREAM
// "Copy" convention: bytes read + written per second, on as many threads as the backend);
// weight_bytes_per_token (every weight read by one decode step, the embedding table counted as one
// row unless tied to the output head); decode_bw_efficiency = weight_bytes_per_token x batch-1
// tokens_per_s / memcpy bandwidth; accuracy.exact_match over models/<dir>/heldout-2digit.txt with
// --accuracy.
//
// Backend cuda: the bandwidth baseline is the GPU's device-to-device copy in the same run
// (device_copy_bandwidth_bytes_per_s, reads + writes), and the output adds warm_up (context,
// no-op kernel, cuBLAS handle timings before the engine starts), weight_load_seconds and
// paged_attention[] (the decode kernel alone at 2k and 8k context, KV bytes read per second).
//
// With prefix_share >= 0 the output is instead prefix_cache.{on,off}.{ttft_p50_ms, ttft_p99_ms,
// prefill_tokens_computed, prefix_hit_tokens} and prefix_cache.ratio.{prefill_tokens_off_over_on,
// ttft_p50_off_over_on, prefill_tokens_reduction}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exa::engine {

struct EngineBenchOptions {
  std::string model_dir;
  std::string backend = "cpu";
  int device = 0;   // backend cuda: the GPU
  int threads = 0;  // 0: one per hardware thread
  bool accuracy = false;
  // Prompt lengths measured; --prefix-share uses the first.
  std::vector<int32_t> prefill_tokens = {128, 512};
  // Backend cpu: force this kernel path (cpu_isa.h names: scalar, avx2, avx512, avx512bf16);
  // empty: the best the CPU supports.
  std::string isa;
  int cpu_spin_us = 50;               // backend cpu: EngineOptions::cpu_spin_us
  bool cpu_bf16_activations = false;  // backend cpu: EngineOptions::cpu_bf16_activations
  int32_t decode_tokens = 16;         // generated per sequence in each decode measurement
  // Decode samples at this temperature (seeded; 0: greedy): what the sampler costs per step.
  float temperature = 0.0f;
  std::vector<int32_t> batch_sizes = {1, 8, 32};
  int64_t kv_cache_bytes = int64_t{512} << 20;
  int64_t memcpy_bytes = int64_t{256} << 20;
  int32_t repeats = 3;  // each throughput figure is the best of this many rounds
  // --prefix-share F (>= 0): instead of throughput, `prefix_requests` prompts of prefill_tokens
  // each, the first F of every prompt the same (a shared system prompt), sent one at a time to an
  // engine with the prefix cache and to one without, in the same run: TTFT and prefill tokens
  // computed on both (docs/perf/engine.md).
  double prefix_share = -1;
  int32_t prefix_requests = 32;
  // Non-empty: instead of throughput, decode at each batch size with every sequence held to this
  // JSON Schema (docs/architecture.md#structured-outputs) and without, interleaved on one engine
  // with the model's tokenizer: the cost of the mask. A schema whose values cannot end within
  // decode_tokens measures a steady state.
  std::string json_schema;
};

absl::StatusOr<nlohmann::json> RunEngineBench(const EngineBenchOptions& options);

// Memory copy bandwidth over `bytes`-sized buffers on `threads` threads, best of a few runs, in
// bytes read + written per second.
double MeasureMemcpyBandwidth(int64_t bytes, int threads);

}  // namespace exa::engine
