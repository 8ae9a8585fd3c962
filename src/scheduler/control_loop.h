// The scheduler's control loop as one sans-IO step (docs/architecture.md#flows): the membership
// view, the node agents' reports and the committed spec store in; the node actions, relabels,
// rollout-state writes and events out. The scheduler service (scheduler_service.h) runs it every
// reconcile interval on every scheduler and carries out what it returns over gRPC; exaserve-sim
// cluster runs the same step over its simulated network, so the simulator proves this code.
//
// Every scheduler steps: each keeps the node table, the deployment status and events (Describe
// answers anywhere) and the latency and memory windows (a new reconciler judges a rollout with
// samples it already has). Only the one `acting` — the Raft leader once it applied a barrier of
// its term (raft_spec_store.h) — advances rollouts, applies operator commands and gets actions
// back; a scheduler cut off with a minority leads nothing, so it acts on nothing.
//
// What a step does, in order: merge the membership view into the node table; parse and plan the
// stored specs (cached per version); take the node reports (replicas, staged weights, latency and
// memory samples, label drift against the stored label rules); split each spec into version
// tracks by its rollout (rollout.h); run Reconcile (reconciler.h); sum the tracks into each
// deployment's status; announce what it will do as events.
//
// Thread safety: none; one owner calls every method (the service holds its lock around them).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/label_rule.h"
#include "membership/member.h"
#include "scheduler/autoscaler.h"
#include "scheduler/leak_detector.h"
#include "scheduler/memory_planner.h"
#include "scheduler/reconciler.h"
#include "scheduler/rollout.h"
#include "scheduler/store_keys.h"

namespace exa::scheduler {

// One replica as its node agent reports it (Node.ListReplicas), free of the wire format.
struct ReportedReplica {
  std::string replica_id;
  std::string state;  // starting, ready, unhealthy, failed, draining, stopped
  std::string reason;
  std::string model;
  std::string version;
  uint64_t generation = 0;
  // The devices it runs on, its memory split evenly over them (Node.ListReplicas reports one).
  std::vector<int> devices;
  absl::Time state_since = absl::InfinitePast();
  cluster::Labels labels;
  // Health figures; 0 or less: not measured.
  double inter_token_p99_ms = 0;
  double ttft_p99_ms = 0;
  double error_rate = 0;
  int64_t recent_finished = 0;
  uint64_t memory_bytes = 0;
  // Load right now, what the autoscaler follows (autoscaler.h); queue time 0 or less: none.
  int64_t pending_tokens = 0;
  int32_t running_sequences = 0;
  int32_t waiting_sequences = 0;
  double queue_time_p90_ms = 0;
};

// A node agent's answer this step. A node that did not answer keeps its last report.
struct NodeReport {
  std::string node;
  uint64_t boot_id = 0;
  bool pulls_models = false;            // false: it starts replicas from directories of its own
  std::set<std::string> staged_models;  // WeightsKey()s pulled and verified
  std::vector<ReportedReplica> replicas;
};

struct ControlInput {
  absl::Time now;
  const std::vector<membership::Member>* members = nullptr;
  std::span<const NodeReport> reports;  // owned by the caller for the step
  const StoreRecords* state = nullptr;  // committed and applied on this node
  std::string leader;                   // the Raft leader this node knows; empty: none
  uint64_t term = 0;
  bool acting = false;  // this node leads and has applied a barrier of its term
};

// A running replica whose labels miss what the stored rules give it: Admin.LabelReplicas with
// selector {"replica": id}.
struct Relabel {
  std::string spec;
  std::string node;
  std::string replica_id;
  cluster::LabelRule change;
};

// An action for a node agent; a start carries what the node starts.
struct NodeAction {
  Action action;
  std::string model;       // kStart
  std::string version;     // kStart
  std::string backend;     // kStart
  cluster::Labels labels;  // kStart: the spec's, the version, the deployment label, stored rules
};

// What a step said about a deployment (Describe shows the last max_events of them).
struct ControlEvent {
  std::string deployment;
  std::string message;
  bool rollout = false;  // said by the rollout state machine (rollout.h)
};

// An autoscaled deployment's count this step (the metrics and `exaserve-cli autoscale status`
// show it).
struct AutoscaleReport {
  std::string deployment;
  int desired = 0;
  int direction = 0;  // +1 up, -1 down, 0 unchanged: a decision when not 0
  int current = 0;    // the count in force before this step
  int ready = 0;
  double value = -1;  // the metric now, over the ready replicas; below 0: none reported
  bool panic = false;
  int ahead = 0;  // AutoscaleDecision::ahead: replicas whose nodes pre-stage the weights
  std::string reason;
  // The last scale-up that became ready: from the step its count came in force to the step its
  // replicas were all ready, and the count it reached; below 0: none yet seen by this scheduler.
  double last_time_to_ready_s = -1;
  int last_scale_up_to = 0;
};

struct ControlOutput {
  // Empty unless acting.
  std::vector<std::pair<std::string, std::string>> writes;  // rollout states to store
  std::vector<NodeAction> actions;
  std::vector<Relabel> relabels;
  // For the metrics: deployments rolled back this step, and those gone since the last step.
  std::vector<std::string> rollbacks;
  std::vector<std::string> gone;
  std::vector<ControlEvent> events;  // every event of this step, in order
  std::vector<AutoscaleReport> autoscaled;
};

struct ControlLoopOptions {
  PlacementOptions placement;
  size_t max_events = 50;  // kept per deployment
  LeakOptions leaks;
  bool recycle_leaking = true;  // a flagged replica is replaced; false: reported only
  // Relabel calls one step may send (a new rule seen before the nodes report the labels
  // `replica label` just set would otherwise fan out to every replica at once); the rest next step.
  size_t max_relabels_per_step = 256;
};

class ControlLoop {
 public:
  struct Event {
    absl::Time time;
    std::string message;
  };
  struct CachedSpec {
    Version version;  // the record's version it was parsed at
    absl::StatusOr<DesiredDeployment> desired;
  };

  explicit ControlLoop(ControlLoopOptions options);

  // Brings the node table up to date with the membership view (between steps too).
  void ObserveMembers(absl::Time now, const std::vector<membership::Member>& members);
  ControlOutput Step(const ControlInput& in);
  // Forgets what a stopped scheduler must not export: status, leak baselines, the reconciler.
  void Reset();

  // An action or pre-stage that failed on its node (an event; pre-stage failures once per reason).
  void ActionFailed(absl::Time now, const std::string& deployment, const std::string& what,
                    const std::string& error);
  void PrestageFailed(absl::Time now, const std::string& deployment, const std::string& what,
                      const std::string& error);
  void AddEvent(absl::Time now, const std::string& deployment, std::string message);

  // The spec behind a store record, parsed and planned once per version.
  const CachedSpec& Spec(const StoreRecord& record);
  // Drops the cached plan of a spec (its model's shape became known).
  void ForgetSpec(const std::string& key) { specs_.erase(key); }
  ModelCatalog& catalog() { return catalog_; }

  const std::map<std::string, NodeStatus>& nodes() const { return nodes_; }
  const std::map<std::string, DeploymentStatus>& status() const { return status_; }
  const std::deque<Event>* events(const std::string& deployment) const;
  const std::string& reconciler() const { return reconciler_; }
  const MetricWindow& window() const { return window_; }
  const LeakDetector& leaks() const { return leaks_; }  // keyed "node/replica"
  // Models of autoscaled specs that may run no replica (minReplicas 0): a gateway holds their
  // requests while one starts (docs/architecture.md#autoscaling).
  std::set<std::string> ActivatableModels() const;
  // The autoscaler's last step on `deployment`; nullptr when it is not autoscaled.
  const AutoscaleReport* autoscale(const std::string& deployment) const;
  size_t leaking() const { return leaks_.FlaggedIds().size(); }

 private:
  struct NodeWeights {
    bool pulls_models = false;
    std::set<std::string> staged;
  };
  using Specs = std::map<std::string, const DesiredDeployment*, std::less<>>;  // name → parsed
  using ReadyByVersion = std::map<std::string, std::map<std::string, int>, std::less<>>;
  // What a deployment's ready replicas report this step, summed (the autoscaler's input).
  struct Load {
    int ready = 0;
    int64_t pending_tokens = 0;
    int64_t in_flight = 0;
    double ttft_s = 0, queue_s = 0;  // sums over the replicas that reported one
    int ttft_n = 0, queue_n = 0;
  };
  using Loads = std::map<std::string, Load, std::less<>>;
  // What the loop remembers of one reported replica across steps.
  struct ReplicaSeen {
    std::string phase;                             // "state[: reason]" as last reported
    absl::Time sampled_at = absl::InfinitePast();  // its last latency sample
    absl::Time reported_at = absl::InfinitePast();
  };

  void StepInto(const ControlInput& in, ControlOutput& out);
  void Record(absl::Time now, const std::string& deployment, std::string message, bool rollout);
  Specs SpecsIn(const StoreRecords& state);
  void TakeReport(absl::Time now, const NodeReport& report, const Specs& specs,
                  const std::vector<cluster::LabelRule>& rules, ControlOutput& out,
                  ReadyByVersion& ready_by_version);
  void CatchUpLabels(const std::vector<cluster::LabelRule>& rules, const std::string& node,
                     std::string_view spec, const ReportedReplica& r, ControlOutput& out);
  void AddLoad(std::string_view spec, const ReportedReplica& r);
  ReplicaSeen& Seen(absl::Time now, const std::string& key);
  void ForgetUnseen(absl::Time now);
  static bool SamePhase(std::string_view phase, std::string_view state, std::string_view reason);
  void Sample(absl::Time now, ReplicaSeen& seen, const ReportedReplica& r,
              const DesiredDeployment* d);
  void ObserveMemory(absl::Time now, const std::string& key, std::string_view deployment,
                     const ReportedReplica& r, absl::flat_hash_set<std::string>* seen);
  std::vector<DesiredDeployment> Tracks(const ControlInput& in, const Specs& specs,
                                        ReadyByVersion& ready, ControlOutput& out);
  // The replica count in force for an autoscaled spec, decided this step (autoscaler.h); the
  // acting scheduler stores a change.
  int Autoscale(const ControlInput& in, const DesiredDeployment& d, const RolloutState& rollout,
                ControlOutput& out);
  RolloutState ApplyCommands(absl::Time now, const StoreRecords& state,
                             const InferenceReplicaSpec& spec, RolloutState rollout,
                             ControlOutput& out);
  // The nodes as Reconcile takes them; each node's replicas are moved in, the caller moves them
  // back.
  std::vector<NodeStatus> NodeStatuses(const StoreRecords& state,
                                       const std::set<std::string>& weights);
  void Summarize(const ControlInput& in, const Specs& specs, const ReconcileResult& result,
                 ControlOutput& out);
  void Announce(absl::Time now, const ReconcileResult& result, const Specs& tracks,
                const std::vector<cluster::LabelRule>& rules, ControlOutput& out);

  ControlLoopOptions options_;
  ControlOutput* step_ = nullptr;  // the step under way: its events are collected there
  ModelCatalog catalog_;
  std::map<std::string, CachedSpec> specs_;  // store key → parsed
  std::map<std::string, NodeStatus> nodes_;
  std::map<std::string, DeploymentStatus> status_;
  std::map<std::string, std::deque<Event>> events_;
  absl::flat_hash_map<std::string, ReplicaSeen> replicas_seen_;  // "node/replica" → what
  std::string reconciler_;
  MetricWindow window_{400'000};  // ready replicas' latency samples, by version
  LeakDetector leaks_;            // ready replicas' memory, keyed node/replica
  std::map<std::string, NodeWeights> node_weights_;
  std::set<std::string> prestage_announced_;              // "node\nweights"
  std::map<std::string, std::string> prestage_failures_;  // what → last failure
  GenerationMemory generations_;
  Loads loads_;                                        // this step's, by spec
  std::map<std::string, Autoscaler> autoscalers_;      // by autoscaled spec
  std::map<std::string, int> scaled_;                  // this step's count, by autoscaled spec
  std::map<std::string, AutoscaleReport> autoscaled_;  // this step's reports, by spec
  // A scale-up under way per autoscaled spec (its start and target), and the last one finished.
  struct ScaleUp {
    absl::Time since = absl::InfinitePast();  // InfinitePast: none under way
    int to = 0;
    int previous = -1;  // the count in force at the last step
    double last_s = -1;
    int last_to = 0;
  };
  std::map<std::string, ScaleUp> scale_ups_;
  // Times a scale-up from the step its count `desired` came in force to the step that count was
  // ready.
  void TrackScaleUp(const ControlInput& in, const std::string& name, int desired, int ready,
                    AutoscaleReport& report);
};

}  // namespace exa::scheduler
