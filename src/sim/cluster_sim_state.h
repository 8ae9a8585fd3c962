// The state of `exaserve-sim cluster` (cluster_sim.h) that its translation units share: the
// simulated nodes, their agents, and the ClusterSim that drives them. Internal to src/sim.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/random.h"
#include "consensus/log_storage.h"
#include "membership/swim_core.h"
#include "nlohmann/json.hpp"
#include "scheduler/control_loop.h"
#include "scheduler/raft_spec_store.h"
#include "scheduler/rollout.h"
#include "sim/cluster_sim.h"
#include "sim/event_queue.h"
#include "sim/sim_network.h"
#include "sim/traffic_model.h"

namespace exa::sim::cluster_internal {

// One rack-scale LAN: 0.5-1 ms one way, 1 ms more for a reliable exchange's connection setup,
// nothing lost.
inline const LinkModel kLink{
    .unit_us = 1, .base = 500, .jitter = 500, .reliable_setup = absl::Milliseconds(1), .loss = 0};

using membership::Address;
using membership::Channel;
using membership::MemberState;
using membership::SwimCore;
using scheduler::Action;
using scheduler::ActionKind;
using scheduler::NodeStatus;
using scheduler::ReplicaPhase;
using scheduler::ReplicaRecord;
using json = nlohmann::json;

constexpr absl::Duration kAgentInterval = absl::Milliseconds(250);
constexpr int kStepEveryChecks = 4;  // the reconciler steps once a second
// diurnal: load runs this long from the end of bring-up before the measured day begins, so the
// autoscaler starts from a count fitted to it rather than from the idle minimum.
constexpr absl::Duration kDiurnalWarmup = absl::Minutes(10);
constexpr absl::Duration kProbeDelay = absl::Seconds(1);  // model probe before ready

inline double Round3(double v) { return std::round(v * 1000.0) / 1000.0; }

struct AgentReplica {
  ReplicaRecord record;
  absl::Time ready_at;
  double p99_ms = 0;          // the latency it reports (canary scenarios)
  uint64_t memory_bytes = 0;  // the memory it reports (canary and leak scenarios)
  uint64_t traffic_id = 0;    // its handle in the diurnal scenario's TrafficModel
  bool draining = false;      // stopped: finishes what it holds, takes nothing new (diurnal)
};

struct SimNode {
  std::string id;
  Address address;
  int rack = 0;
  bool gpu = false;
  bool scheduler = false;
  std::unique_ptr<SwimCore> core;
  bool started = false;
  bool killed = false;
  int group = 0;  // nodes talk only within a group (network cuts)
  uint64_t tick_gen = 0;
  absl::Time scheduled = absl::InfiniteFuture();
  // Node agent.
  uint64_t boot_id = 1;
  std::vector<AgentReplica> replicas;
  std::map<std::string, absl::Time> staging;
  std::set<std::string> staged;
  // Scheduler: the spec store (its Raft log in memory) and the control loop, as the scheduler
  // service runs them.
  std::unique_ptr<consensus::MemoryLogStorage> log;
  std::unique_ptr<scheduler::RaftSpecStore> store;
  std::unique_ptr<scheduler::ControlLoop> loop;
};

struct Wave {
  int replicas = 0;
  int cumulative = 0;
  double started_s = -1;
  double ready_s = -1;
};

class ClusterSim {
 public:
  explicit ClusterSim(const ClusterSimOptions& o) : o_(o), rng_(o.seed), network_(kLink) {
    start_ = absl::UnixEpoch() + absl::Hours(24 * 365 * 50);
  }
  absl::StatusOr<json> Run();

 private:
  enum class Kind : uint8_t { kTick, kDeliver, kStart, kCheck, kFault, kHeal, kStore };
  struct QEvent {
    Kind kind;
    int node;
    uint64_t gen;
    InFlight packet;                           // kDeliver (kStore: who sent it)
    std::shared_ptr<const std::string> frame;  // kStore
  };
  enum class Phase : uint8_t { kWarmup, kBringup, kSteady, kFault, kDone };

  void Push(absl::Time at, Kind kind, int node, uint64_t gen = 0, InFlight packet = {}) {
    queue_.Push(at, QEvent{kind, node, gen, std::move(packet), nullptr});
  }
  bool Connected(int a, int b) const {
    return !nodes_[a].killed && !nodes_[b].killed && nodes_[a].group == nodes_[b].group;
  }
  double Since(absl::Time t, absl::Time base) const { return absl::ToDoubleSeconds(t - base); }

  absl::Status Setup();
  void StartNode(absl::Time now, int i);
  void AfterInteraction(absl::Time now, int i);
  void Check(absl::Time now);
  void AdvanceAgents(absl::Time now);
  // Every live scheduler's control step. What each started GPU node's agent answers to
  // Node.ListReplicas is built once and grouped by partition: a scheduler reaches its own group.
  void StepSchedulers(absl::Time now);
  void SchedulerStep(absl::Time now, int s);
  // Rollout figures, flagged leaks and takeovers, from the acting scheduler's step.
  void Observe(absl::Time now, int s, const scheduler::ControlOutput& out);
  void Apply(absl::Time now, int s, const Action& a);
  // A stop reaches node `n`'s agent: the replica goes (diurnal: drains first).
  void Stop(absl::Time now, SimNode& n, const Action& a);
  void StartFault(absl::Time now);
  bool Canary() const { return o_.scenario == "canary-bad" || o_.scenario == "canary-good"; }
  // What ready replicas report next, as the node agents measure it.
  void SampleLatency();
  json RolloutFigures();
  json LifetimeFigures();
  void Heal(absl::Time now);
  void FlushStore(absl::Time now, int i);
  void WriteSpecs(absl::Time now);
  void PutSpec(absl::Time now, int i, const scheduler::InferenceReplicaSpec& spec);
  bool AllSeeAllAlive() const;
  int ReadyReplicas() const;
  void RecordBringup(absl::Time now);
  json PlacementFigures();

  ClusterSimOptions o_;
  Random rng_;
  absl::Time start_;
  std::vector<SimNode> nodes_;
  std::map<int, std::vector<scheduler::NodeReport>> reports_;  // this round's, by group
  SimNetwork network_;
  std::unordered_map<std::string, int> by_id_;
  EventQueue<QEvent> queue_;
  membership::Config config_ = membership::Config::Lan();

  std::vector<scheduler::DesiredDeployment> desired_;  // what the operator applies
  uint64_t weight_bytes_ = 0;
  int replicas_per_node_planned_ = 0;

  Phase phase_ = Phase::kWarmup;
  int checks_ = 0;
  absl::Time applied_at_ = absl::InfiniteFuture();
  absl::Time fault_at_ = absl::InfiniteFuture();
  absl::Time end_ = absl::InfiniteFuture();
  double warmup_s_ = 0;
  double all_ready_s_ = -1;
  double reconcile_cpu_s_ = 0;
  std::map<int, Wave> waves_;
  json bringup_;
  json placement_;

  // Fault bookkeeping.
  std::vector<int> faulted_;
  int replicas_on_faulted_ = 0;
  std::vector<double> rebuild_s_;  // relative to the fault
  int duplicate_starts_ = 0;
  int stale_stopped_ = 0;
  std::string last_reconciler_;
  std::string killed_leader_;
  double takeover_s_ = -1;
  std::string new_reconciler_;
  std::string pending_reason_;
  std::string spec_writer_;
  std::map<uint64_t, scheduler::InferenceReplicaSpec> spec_writes_;  // not yet acknowledged
  double spec_acknowledged_s_ = -1;
  int spec_write_retries_ = 0;
  std::map<std::string, int> starts_by_reason_;
  double all_ready_again_s_ = -1;
  double first_prestage_s_ = -1;  // after the fault: a rebuild target lacked the weights
  absl::Time healed_at_ = absl::InfiniteFuture();

  // Rollout bookkeeping (canary scenarios).
  std::string new_version_;
  scheduler::RolloutState rollout_;  // as the reconciler last stored it
  int new_version_starts_ = 0;
  int overcommits_ = 0;
  double min_availability_ = 1.0;
  double rollout_end_s_ = -1;
  std::vector<std::string> rollout_events_;

  // lifetime and leak scenarios.
  std::map<std::string, int> lifetime_restarts_;  // replica id → restarts
  std::vector<double> lifetime_restart_s_;
  int max_out_of_service_ = 0;
  std::vector<std::string> flagged_;  // replica ids the acting scheduler holds flagged now
  std::string leaking_;               // replica id
  uint64_t leaking_generation_ = 0;   // the generation that leaks; a replacement does not
  int leak_restarts_ = 0;             // stops and surge copies for Replacement::kMemoryLeak
  double leak_restart_s_ = -1;        // the first, after the fault
  absl::Time next_memory_sample_ = absl::InfiniteFuture();
  std::map<std::string, double> flagged_at_s_;
  void SampleMemory(absl::Time now);
  // The highest generation of replica `id` any node hosts; 0 when none does.
  uint64_t GenerationOf(const std::string& id) const;

  // diurnal scenario (cluster_sim_diurnal.cc): request load on the autoscaled deployment.
  absl::Status SetupDiurnal();
  // One second of arrivals over the ready replicas; drained replicas go; replica-seconds counted.
  void StepTraffic(absl::Time now);
  // What the node agent reports of a replica's load (ReplicaLoad) into `r`.
  void ReportLoad(absl::Time now, const AgentReplica& a, scheduler::ReportedReplica& r);
  // A stop on a replica holding requests drains it; true when the stop was taken that way.
  bool Drain(absl::Time now, SimNode& n, const Action& a);
  void NoteDecisions(absl::Time now, const scheduler::ControlOutput& out);
  json DiurnalFigures();
  std::unique_ptr<TrafficModel> traffic_;
  bool peak_sized_ = false;    // the peak sized for maxReplicas at the target (SetupDiurnal)
  double peak_slot_load_ = 0;  // the share of maxReplicas' slots the peak keeps busy, before bursts
  absl::Time traffic_start_ = absl::InfiniteFuture();  // the day curve's 0
  bool measuring_ = false;                             // past the warm-up: figures count
  uint64_t next_traffic_id_ = 0;
  double replica_seconds_ = 0;  // replicas holding memory (starting, ready, draining) × seconds
  double traffic_seconds_ = 0;
  int peak_held_ = 0;
  int least_held_ = -1;
  double node_seconds_ = 0;  // nodes holding at least one replica × seconds
  int most_nodes_ = 0;
  int least_nodes_ = -1;
  struct Decision {
    double t;  // seconds into the day
    int direction;
    bool panic;
  };
  std::vector<Decision> decisions_;
  json load_series_ = json::array();
};

}  // namespace exa::sim::cluster_internal
