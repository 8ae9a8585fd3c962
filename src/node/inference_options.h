// The inference role's options: the `inference` config section (docs/architecture.md#roles), the
// replicas a node starts from its config and the defaults StartReplica falls back on. Kept apart
// from replica_host.h so that what a config file may say reads as one unit.
// Thread-safety: plain data; RegisterConfig runs once, before the schema parses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "config/schema.h"
#include "engine/kv_cache.h"

namespace exa::node {

struct InferenceOptions {
  // Model directories (Hugging Face layout), each optionally "@version" (default "v1").
  // Empty: the bundled model (models/exa-tiny-arith) when it can be found.
  std::vector<std::string> models;
  // The name clients give in `model` for the one model in `models` (vLLM's
  // --served-model-name); empty: the directory's name (docs/reference/flags.md#your-own-model).
  std::string served_model_name;
  int replicas_per_model = 1;
  std::string backend = "cpu";  // cpu, cuda or sim
  int threads = 0;              // per replica; 0: one per hardware thread
  // cpu backend: engine::EngineOptions::cpu_bf16_activations.
  bool cpu_bf16_activations = false;
  config::Bytes kv_cache_bytes{64 << 20};
  int max_batch_tokens = 512;
  int max_running = 64;
  int max_queue = 256;
  // Automatic prefix caching (docs/architecture.md#prefix-cache).
  engine::PrefixCacheOptions prefix_cache;
  // sim backend only: every modeled step takes this many times longer (a slow-replica drill).
  double sim_slowdown = 1.0;
  // sim backend: the versions sim_slowdown applies to (a bad-release drill); empty: every replica.
  std::vector<std::string> sim_slow_versions;
  // sim backend only: every this-many-th step fails with every request in it (a failing-release
  // drill); 0: off. Applies to sim_failing_versions (empty: every replica).
  int sim_fail_every_steps = 0;
  std::vector<std::string> sim_failing_versions;
  // sim backend only: every step keeps this many more bytes for good (a leaking-release drill);
  // 0: off. Applies to sim_leaking_versions (empty: every replica).
  config::Bytes sim_leak_bytes_per_step{0};
  std::vector<std::string> sim_leaking_versions;
  // sim backend only, a drill: while this file exists every replica's step loop hangs.
  std::string sim_stall_file;
  // cuda backend: the GPUs (CUDA indices) replicas are spread over, round-robin in start order.
  // Empty: every GPU the node found (gpu_count, set by the daemon from its inventory). Decimal
  // strings (the config schema's list type), validated as 0-255.
  std::vector<std::string> gpus;
  int gpu_count = 0;  // not a config key
  // cuda backend: run the GEMM and copy burn-in on every GPU at start; a node that fails it is
  // tainted "burn-in-failed" and starts no replica.
  bool burn_in = true;
  // The memory ledger: the share of each GPU's memory replicas may be promised, and the host
  // memory cpu/sim replicas may be promised (0: not accounted).
  double gpu_memory_utilization = 0.9;
  config::Bytes host_memory_budget{0};
  std::vector<int64_t> gpu_memory_bytes;  // per GPU, from the inventory; not a config key
  // How long StopReplica waits for a draining replica's requests by default (the daemon sets
  // lifecycle.drain_timeout; not a key of its own).
  absl::Duration drain_timeout = absl::Seconds(30);
};

void RegisterConfig(config::Schema& schema, std::string_view section, InferenceOptions* options);

// What the schema cannot check one key at a time: each of `models` is a directory holding a
// config.json, its version is well formed, and served_model_name names exactly one model.
// The error names the path or value and what is allowed.
absl::Status ValidateModels(const InferenceOptions& options);

}  // namespace exa::node
