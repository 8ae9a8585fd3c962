// exaserve-sim cluster: the scheduler at cluster scale on virtual time. Every node runs the
// real SWIM core (membership/swim_core.h) over a simulated network; scheduler nodes run the real
// election (cluster/election.h), the real spec store (scheduler/raft_spec_store.h: libraft, its
// log in memory, its frames over the simulated network) and the real control loop
// (scheduler/control_loop.h: memory planner, placement, rollouts, leak detection, reconciler),
// stepping once a second as the scheduler service does; only the Raft leader's actions reach the
// node agents. GPU nodes run a simulated node agent whose replicas become ready after a load-time
// model (weights pre-staged from the rack cache, then loaded from local NVMe) and report what
// Node.ListReplicas reports.
//
// What is simulated rather than real: the network (latency + jitter, cuts), the node agents and
// their RPCs (an action reaches a node agent iff the network connects the two), and persistence.
//
// `--nodes` counts GPU nodes, the ones that host replicas; `--schedulers` control nodes without
// GPUs are added beside them (role purity keeps replicas off them, docs/architecture.md#roles).
//
// Timeline: nodes join; once every node sees every other alive the spec is applied (t = 0 of
// the bring-up); once all replicas are ready (or bring-up stalls) the scenario's fault happens
// (kill-scheduler-leader: as the second wave starts), and the run continues for `--duration`.
// canary-bad / canary-good: instead of a fault the spec's version changes to "<v>-new"
// and the reconciler rolls it out with the real rollout state machine (scheduler/rollout.h);
// ready replicas report a p99 latency every 30 s from a latency model in which the new version
// is 30 % slower (canary-bad) or as fast (canary-good); the run ends when the rollout has been
// rolled back or has completed (or after --duration).
// lifetime: the run goes on for --duration (give 24 h and more) with the spec's maxLifetime;
// it counts restarts per replica, the most replicas out of service at once and the lowest
// availability. leak: every ready replica reports its memory hourly (±0.5 % noise); one, chosen
// at random, grows 3 % of its baseline an hour; the leak detector (scheduler/leak_detector.h)
// must flag that one only. diurnal: the spec is autoscaled and starts at its `replicas`; once
// bring-up ends, requests arrive on a day curve (sim/traffic_model.h), ready replicas report
// their load, the autoscaler sets the count, and a stopped replica drains before it goes; after
// a 10-minute warm-up the measured day (--duration) begins; it reports
// replica-hours against a static deployment sized for the peak, P99 TTFT per minute, the
// autoscaler's reversals and the requests lost.
//
// Thread safety: RunClusterSim is a pure function of its options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exa::sim {

struct ClusterSimOptions {
  int nodes = 256;
  int racks = 16;
  int gpus_per_node = 8;
  uint64_t gpu_memory_bytes = uint64_t{80} << 30;
  int schedulers = 3;
  std::string spec_file;
  std::string spec_yaml;  // used when spec_file is empty (tests)
  // "", kill-8-nodes, blip-20s, kill-scheduler-leader, rack-partition, canary-bad, canary-good,
  // lifetime, leak, diurnal
  std::string scenario;
  int fault_nodes = 8;  // nodes killed or cut off by kill-8-nodes and blip-20s
  double blip_s = 20;
  double partition_s = 60;
  double duration_s = 120;  // after the fault
  uint64_t seed = 1;
  double stage_gbps = 2.5;  // rack cache → local NVMe, GB/s per node
  double load_gbps = 5.0;   // local NVMe → GPU, GB/s per replica
  double max_bringup_s = 1800;
  // diurnal (sim/traffic_model.h): the trace whose burstiness and request lengths the load takes,
  // the day's length, the peak's load, and the P99 TTFT each minute is held to (a ttftP99
  // autoscaling target overrides it). peak_load 0 sizes the peak for maxReplicas: at the trace's
  // busiest minute, maxReplicas replicas each hold the pendingTokensPerReplica target (for a time
  // metric, which has no such size, 0.5); above 0 it is the peak before burstiness as a fraction
  // of what maxReplicas replicas serve with every slot busy.
  std::string trace_file;
  double day_s = 86400;
  double peak_load = 0;
  double ttft_target_s = 2;
};

absl::StatusOr<ClusterSimOptions> ParseClusterSimArgs(const std::vector<std::string>& args);

nlohmann::json RunClusterSim(const ClusterSimOptions& options);

// main() of `exaserve-sim cluster ...` (argv[1] is "cluster").
int ClusterSimMain(int argc, char** argv);

}  // namespace exa::sim
