// `exaserve-bench route --mode live` and `--mode overhead`: the routing benchmark against real
// processes on loopback (real gRPC), with the workload of route_workload.h.
//
// live: starts N exaserved inference nodes (sim backend, R replicas each, the engine settings of
// BenchEngineOptions) and, for each policy in turn, a gateway-only node started with
// EXASERVE_GATEWAY_ROUTING_POLICY=<policy>; drives Poisson arrivals at rho x capacity through
// the gateway's gRPC Inference.Generate for `duration_s`, waits for the stragglers (each call has
// a deadline, so nothing can hang the bench), stops the gateway. Run time per (policy, rho) is
// duration_s plus the drain (bounded by call_timeout_s), plus a few seconds of start-up.
// --kill-nodes N (--kill-one: N = 1) adds a fault-free kv-token-aware run and then the same
// workload again while N inference nodes are killed with SIGKILL one after another; it prints
// what happened to the requests, how many streams differ from the fault-free run's
// (mismatched_streams) and the longest token gap of the streams that crossed a kill.
//
// overhead: one inference node and one gateway; each arrival of a Poisson stream at `rate` goes at
// random either through the gateway or straight to a replica's Node.Generate, same run, same
// node. Added latency = quantile through the gateway - the same quantile direct. Direct calls go
// round-robin over the replicas and so, by default, does the gateway (--overhead-policy).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/route_workload.h"
#include "nlohmann/json.hpp"

namespace exa::bench {

struct RouteLiveOptions {
  std::string exaserved;     // path to the exaserved binary
  std::string work_dir;      // data dirs and logs; empty: a fresh directory under /tmp
  std::string gateway_addr;  // host:port of a running gateway: use it instead of starting one
  int32_t nodes = 4;
  int32_t replicas_per_node = 3;
  std::vector<double> rhos = {0.85};
  std::vector<std::string> policies = {"kv-token-aware", "least-connections", "round-robin"};
  double duration_s = 60;       // arrivals per (policy, rho)
  double call_timeout_s = 120;  // a call still open this long after it started counts as hung
  // A last pair of kv-token-aware runs: fault-free, then killing this many inference processes
  // one after another; the streams of both are compared (--kill-one is 1).
  int32_t kill_nodes = 0;
  double overhead_rate = 500;  // requests per second, overhead mode
  double overhead_duration_s = 20;
  int32_t overhead_max_tokens = 4;
  int32_t overhead_prompt_tokens = 16;
  // The gateway's routing policy in overhead mode. Round-robin by default: the direct calls go
  // round-robin over the replicas, so the two paths place requests alike and "added" is the
  // hop's cost alone (token-aware there measured ~5-7 ms of placement difference, not hop cost).
  std::string overhead_policy = "round-robin";
  int64_t capacity_requests = 3000;
  uint64_t seed = 1;
  WorkloadOptions workload;
  std::string trace;  // a recorded trace instead of the synthetic workload (bench/trace.h)
};

absl::StatusOr<nlohmann::json> RunRouteLive(const RouteLiveOptions& options);
absl::StatusOr<nlohmann::json> RunRouteOverhead(const RouteLiveOptions& options);

}  // namespace exa::bench
