// `exaserve-bench route`: how routing policies compare on the same workload (route_workload.h).
//
//   --mode sim      discrete-event simulation through the real router (router::ReplicaTable and
//                   its policies) and the sim engine (engine::SimReplica, the 13B-on-A100 cost
//                   model) in virtual time: M replicas, G gateways each with its own table fed by
//                   every node's load report at 10 Hz and on a slot change (at most 50 Hz), as
//                   the real nodes report (so staleness and herding are real).
//   --mode live     real processes on loopback: one gateway and N exaserved inference nodes with
//                   R sim replicas each, driven through the gateway's gRPC Inference.Generate
//                   (route_live.h).
//   --mode overhead the gateway's added latency: Node.Generate direct vs through the gateway.
//
// Every mode prints one JSON object; per policy and load: P50/P99 time to first token and
// end-to-end latency, goodput (requests and output tokens per second of the measured window)
// and rejections.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/route_workload.h"
#include "engine/engine.h"
#include "nlohmann/json.hpp"

namespace exa::bench {

struct RouteSimOptions {
  // Replica sizing (RouteProfile): "13b-a100-64" (the default), "13b-a100", "long-context".
  std::string profile = "13b-a100-64";
  int32_t slots = 0;      // > 0: overrides the profile's batch slots (max running sequences)
  int64_t kv_tokens = 0;  // > 0: overrides the profile's KV cache, in tokens
  // A recorded trace (bench/trace.h) instead of the synthetic workload; empty: synthetic.
  std::string trace;
  // How often a node's cached-block deltas reach the gateways (node_service.h batches them
  // for 500 ms): the index is this stale.
  double cache_report_hz = 2;
  int32_t replicas = 48;
  int32_t replicas_per_node = 8;  // one load report per node carries all its replicas
  int32_t gateways = 4;
  double report_hz = 10;
  // A node also reports as soon as a replica's sequences or blocked count changed, at most this
  // often (node_service.h: load on change); 0: only report_hz.
  double report_change_hz = 50;
  std::vector<double> rhos = {0.5, 0.7, 0.85, 0.95};
  // The first is the reference the comparisons divide by. "oracle" is kv-token-aware on instant
  // global state: every replica's true load (true remaining output lengths) and exact cache.
  std::vector<std::string> policies = {"kv-token-aware", "token-aware", "least-connections",
                                       "least-requests", "round-robin", "random"};
  int64_t requests = 20000;          // measured per (policy, rho), after the warm-up
  double warmup_fraction = 0.1;      // extra requests before the measured ones, not counted
  int64_t capacity_requests = 3000;  // completions of the saturation run that sizes capacity
  uint64_t seed = 1;
  WorkloadOptions workload;
};

// The replica configuration both modes use: the sim cost model's defaults (13B FP16 on one
// A100-80GB) with the engine's default batching and a KV budget of what such a GPU holds beside
// the weights.
engine::EngineOptions BenchEngineOptions();
// A named replica sizing (docs/perf/routing.md#profiles); INVALID_ARGUMENT lists the names.
//   13b-a100-64   BenchEngineOptions(): 64 slots, 4096 context, ~52 k tokens of KV
//   13b-a100      4 slots, 4096 context, ~34 000 tokens of KV (the source document's sizing)
//   long-context  16 slots, 131072 context, 262144 tokens of KV
absl::StatusOr<engine::EngineOptions> RouteProfile(const std::string& name);
nlohmann::json DescribeEngine(const engine::EngineOptions& options);

// One (policy, load) measurement.
struct RunStats {
  std::string policy;
  double rho = 0;
  double arrival_rate = 0;  // requests per second offered
  std::vector<double> ttft_ms, e2e_ms;
  int64_t completed = 0;
  int64_t rejected = 0;
  int64_t failed = 0;
  std::string first_error;  // live: the first failed request's status, for the reader
  int64_t output_tokens = 0;
  double window_s = 0;  // from the first to the last measured arrival
  // Prompt tokens the replicas took from their prefix caches / computed, over the run.
  int64_t prefix_hit_tokens = 0, prefix_miss_tokens = 0;
  // Sim: load reports a node sent per second of virtual time, over the run (0: not measured).
  int64_t load_reports = 0;
  double load_reports_per_node_s = 0;
  // Of the measured requests' prompt tokens, what one unbounded cache would have held.
  double unbounded_hit_ratio = 0;
  // ...and what one least-recently-used cache as large as every replica's KV together would
  // have held (running sequences' blocks not taken out: an upper reference for a bounded
  // cluster).
  double pooled_lru_hit_ratio = 0;
  std::vector<double> choose_us;  // each routing decision's wall time (sim): ReplicaTable::Choose
  std::vector<double> hash_us;    // hashing every full block of each prompt (sim)
};
nlohmann::json ToJson(const RunStats& stats);
// Per rho: every other policy's P99s over `reference`'s, and goodput differences.
nlohmann::json Compare(const std::vector<RunStats>& runs, const std::string& reference);

absl::StatusOr<nlohmann::json> RunRouteSim(const RouteSimOptions& options);

// `--grid`: the never-worse grid (docs/perf/routing.md#grid). For each workload (synthetic short
// prompts, synthetic heavy-tailed prompts with median 400 and p99 20 000, then each of `traces`)
// x slots {4, 16, 64} x the options' rhos, on the long-context profile's KV and context: the
// first policy of the options (the default's) against least-connections and round-robin. Each
// cell gives the default's P99 TTFT and end-to-end over the better of the two, and its goodput
// against the best; `within` says whether both ratios are at most 1.03 and goodput within 2 %.
absl::StatusOr<nlohmann::json> RunRouteGrid(const RouteSimOptions& options,
                                            const std::vector<std::string>& traces);

// Requests per second one replica sustains on the workload when never starved (a closed loop
// keeping more than max_running requests outstanding), measured in virtual time.
absl::StatusOr<double> MeasureReplicaCapacity(const engine::EngineOptions& engine,
                                              const WorkloadOptions& workload, int64_t completions,
                                              uint64_t seed, const traces::Trace* trace = nullptr);

}  // namespace exa::bench
