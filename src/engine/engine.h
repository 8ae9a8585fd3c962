// Engine: one model replica's inference loop, the thing a node agent hosts. Requests go in
// through a bounded admission queue; a dedicated engine thread batches them continuously (chunked
// prefill mixed with decode, paged KV cache, preemption by recompute) and streams tokens back
// through each request's callback.
//
//   EngineOptions options;
//   options.model_dir = "models/exa-tiny-arith";
//   EXA_ASSIGN_OR_RETURN(auto engine, CreateEngine(options, detokenizer));
//   GenerateRequest req{.prompt_tokens = ids, .max_tokens = 8, .callback = on_event};
//   EXA_ASSIGN_OR_RETURN(RequestId id, engine->Submit(std::move(req)));
//   engine->Cancel(id);            // client went away: frees its KV blocks
//   EngineLoad load = engine->Load();  // for the router (pending tokens, KV use, latency)
//
// Threading: Submit, Cancel, Load and info may be called from any thread. Callbacks run on the
// engine thread. Stop() (also run by the destructor) ends every request with CANCELLED and joins
// the thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/detokenizer.h"
#include "engine/kv_cache.h"
#include "engine/prefix_journal.h"
#include "engine/request.h"
#include "engine/sim_cost_model.h"

namespace exa::engine {

struct EngineOptions {
  std::string model_dir;        // HF layout; unused by the sim backend
  std::string backend = "cpu";  // "cpu", "cuda" or "sim"
  int threads = 0;              // CPU backend threads; 0: one per hardware thread
  // CPU backend: how long pool workers spin for the next job, and the engine thread for the
  // workers, before blocking (cpu/thread_pool.h). Spinning saves the wake-up on each of a decode
  // step's ~100 parallel regions on a machine the engine has to itself; on one with more runnable
  // threads than cores it costs more than it saves (docs/perf/engine.md), so 0 there.
  int cpu_spin_us = 50;
  // CPU backend, bf16 weights: round activations to bf16 before each matrix product, as a bf16
  // model computes in PyTorch or llama.cpp; on CPUs with AVX512-BF16 the products then run at
  // twice the fp32 rate (docs/architecture.md#cpu-backend). Off: activations stay fp32 and every
  // product is exact (the reference numerics).
  bool cpu_bf16_activations = false;
  int device = 0;                               // backend "cuda": the GPU's CUDA index
  int64_t kv_cache_bytes = int64_t{256} << 20;  // fixes the block count up front
  int32_t kv_block_size = 16;                   // vLLM's default block size
  int32_t max_batch_tokens = 512;               // per-step token budget (prefill chunks + decodes)
  int32_t max_running = 64;                     // sequences batched at once
  int32_t max_queue = 1024;                     // admission queue; full -> RESOURCE_EXHAUSTED
  int32_t max_context = 0;                      // 0: the model's max_position_embeddings
  uint64_t seed = 0;                            // for requests that bring no seed of their own
  PrefixCacheOptions prefix_cache;              // automatic prefix caching (kv_cache.h)
  // What a cached block's K and V depend on besides its tokens (model, version, dtype, adapter):
  // the root of the block hashes this replica publishes, so gateways compute the same names.
  std::string prefix_cache_namespace;
  SimCostModel sim;  // backend "sim" only
};

struct EngineInfo {
  std::string backend;
  int32_t vocab_size = 0;
  int32_t max_context = 0;
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;
  int64_t weight_bytes = 0;        // read once per decode step
  double weight_load_seconds = 0;  // cuda: the weights' copy to the GPU (shared: the first load)
  int32_t kv_blocks_total = 0;
  int32_t kv_block_size = 0;
};

// Load of one replica, as the router wants it (docs/architecture.md#routing: route by pending
// tokens).
struct EngineLoad {
  // Prompt tokens not yet prefilled plus an estimate of decode tokens still to come, queued
  // requests included. The decode estimate comes from the replica's recent completed output
  // lengths (output_length_history.h): E[L - g | L > g] for a sequence g tokens in, capped by
  // its remaining max_tokens and context; the cap itself until enough requests have finished.
  int64_t pending_tokens = 0;
  // Of the replica's last requests that ended (up to 256; cancelled ones not counted), the
  // fraction that ended in an engine error, and how many ended: what a rollout compares as
  // errorRate (docs/architecture.md#releases).
  double error_rate = 0;
  int32_t recent_finished = 0;
  // Mean output length of recently completed requests; 0 until the history has enough samples.
  double expected_output_tokens = 0;
  int32_t running = 0;
  int32_t max_running = 0;  // batch slots: the scheduler's max_running
  int32_t waiting = 0;      // admitted but not running (queued, or preempted)
  // Of `waiting`, those the scheduler holds for want of a batch slot or KV blocks (preempted
  // ones included), not requests merely in the admission queue until the next step: what a
  // router should avoid. A request queued for admission waits at most one step.
  int32_t blocked = 0;
  int32_t kv_blocks_used = 0;  // referenced by a sequence
  int32_t kv_blocks_total = 0;
  // Prefix caching (docs/architecture.md#prefix-cache): blocks published under a hash
  // (referenced or not), cached blocks evicted since start, and prompt tokens taken from the cache
  // and computed at admission since start.
  int32_t kv_blocks_cached = 0;
  uint64_t kv_evictions = 0;
  int64_t prefix_hit_tokens = 0, prefix_miss_tokens = 0;
  // Bytes the replica holds of its own: KV cache, buffers, a device pool (the weights, shared
  // between a model's replicas, apart). What leak detection samples
  // (docs/architecture.md#leak-detection).
  int64_t memory_bytes = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;  // time to first token, recent requests
  double itl_p50_ms = 0, itl_p99_ms = 0;    // inter-token latency, recent tokens
  double queue_p90_ms = 0;   // arrival to the first step that ran it, recent requests
  uint64_t preemptions = 0;  // since start
  uint64_t steps = 0;
  // Requests accepted and not finished, counted exactly at the call (queued ones included); what
  // a drain waits on.
  int64_t in_flight = 0;
  // Where the engine thread's time went, summed since start (seconds): choosing the step's
  // chunks, running the model (op launches and waiting for the device), and sampling plus
  // streaming the tokens. device_wait is the part of execute spent blocked on the device.
  double schedule_seconds = 0, execute_seconds = 0, device_wait_seconds = 0, complete_seconds = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // INVALID_ARGUMENT: empty prompt, bad sampling parameters, prompt + max_tokens beyond the
  // context (the message has both numbers); RESOURCE_EXHAUSTED: queue full or the request could
  // never fit the KV cache; UNAVAILABLE: the engine is stopped.
  virtual absl::StatusOr<RequestId> Submit(GenerateRequest request) = 0;
  // Idempotent; unknown or finished ids are ignored.
  virtual void Cancel(RequestId id) = 0;
  virtual EngineLoad Load() const = 0;
  virtual const EngineInfo& info() const = 0;
  virtual void Stop() = 0;
  // The replica's cached-block journal (prefix_journal.h), or null when the engine keeps none.
  virtual const PrefixJournal* prefix_journal() const { return nullptr; }
};

// Builds the engine for `options.backend`; `detokenizer` may be null (no stop strings, no text).
absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(
    const EngineOptions& options, std::shared_ptr<const Detokenizer> detokenizer = nullptr);

}  // namespace exa::engine
