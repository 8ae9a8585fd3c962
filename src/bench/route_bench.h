// `exaserve-bench route`: how routing policies compare on the same workload (route_workload.h).
//
//   --mode sim      discrete-event simulation through the real router (router::ReplicaTable and
//                   its policies) and the sim engine (engine::SimReplica, the 13B-on-A100 cost
//                   model) in virtual time: M replicas, G gateways each with its own table fed by
//                   every node's load report at 10 Hz (so staleness and herding are real).
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
  int32_t replicas = 48;
  int32_t replicas_per_node = 8;  // one load report per node carries all its replicas
  int32_t gateways = 4;
  double report_hz = 10;
  std::vector<double> rhos = {0.5, 0.7, 0.85, 0.95};
  std::vector<std::string> policies = {"token-aware", "least-connections", "least-requests",
                                       "round-robin", "random"};
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
  int64_t output_tokens = 0;
  double window_s = 0;  // from the first to the last measured arrival
};
nlohmann::json ToJson(const RunStats& stats);
// The Done-when ratios per rho: least-connections / token-aware and round-robin / token-aware
// P99s, and goodput differences.
nlohmann::json Compare(const std::vector<RunStats>& runs);

absl::StatusOr<nlohmann::json> RunRouteSim(const RouteSimOptions& options);

// Requests per second one replica sustains on the workload when never starved (a closed loop
// keeping more than max_running requests outstanding), measured in virtual time.
absl::StatusOr<double> MeasureReplicaCapacity(const engine::EngineOptions& engine,
                                              const WorkloadOptions& workload, int64_t completions,
                                              uint64_t seed);

}  // namespace exa::bench
