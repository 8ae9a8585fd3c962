// The reconciler's logic, as a pure step: desired specs + what nodes report +
// the membership view + now → actions for the node agents. The control loop (control_loop.h)
// runs it every second or so on every scheduler; the Raft leader's actions are carried out
// through exaserve.v1.Node/StartReplica|StopReplica; exaserve-sim runs the same code.
//
// Idempotent by construction (docs/architecture.md#flows, docs/architecture.md#consistency): a
// replica's id is `<deployment>-<ordinal>` and each (re)creation of an ordinal carries the next
// generation, so two reconcilers acting on the same inputs issue the same actions, and when their
// inputs differ the next step converges: of two replicas with one id the higher generation wins
// (then a ready one, then the lower node id) and the other is stopped.
//
// Lost vs dead (docs/architecture.md#health-checks): replicas on a suspected node are left alone;
// on a dead node they still count until the spec's deadGrace (30 s) has passed since the death, and
// only then are rebuilt elsewhere; a node back with the same boot keeps its replicas (a stale
// generation is stopped); a node back with a new boot id is a restart: only what it reports now
// counts.
//
// Max lifetime (docs/architecture.md#leak-detection): a ready replica older than its
// JitteredLifetime is stopped and recreated (next generation), oldest first, only while fewer than
// maxUnavailable of the deployment are out of service — a rolling restart that never dips below the
// floor. Make before break where memory allows: a surge copy (the next generation) on another node,
// the old replica serving until it is ready; stop-then-start where no node has room. A replica that
// leak detection flagged (ReplicaRecord::leaking) is replaced the same way, before any expired one.
//
// Bring-up in waves (docs/architecture.md#orchestration): warmupReplicas first, then batchSize per
// wave; a wave starts only when every replica of the earlier waves is ready, and only once the
// deployment's weights are pre-staged on every target node of the wave (Prestage actions first).
// A rising trend (DesiredDeployment::prestage_ahead) pre-stages the nodes the next replicas would
// be placed on, found by a dry run of placement, before the count moves.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "scheduler/placement.h"
#include "scheduler/spec.h"

namespace exa::scheduler {

enum class ReplicaPhase : uint8_t { kStarting, kReady, kFailed };
std::string_view ReplicaPhaseName(ReplicaPhase phase);

// "llama-13b-replica-17".
std::string ReplicaId(std::string_view deployment, int ordinal);

// One replica as a node agent reports it.
struct ReplicaRecord {
  std::string deployment;
  int ordinal = 0;
  uint64_t generation = 0;
  Allocation allocation;
  ReplicaPhase phase = ReplicaPhase::kStarting;
  absl::Time phase_since = absl::InfinitePast();  // when it entered `phase`, as the node saw it
  // Flagged by leak detection (scheduler/leak_detector.h) and to be recycled: replaced like a
  // replica past its max lifetime, ahead of those.
  bool leaking = false;
  // Draining after a stop: it serves nothing new but still holds its memory and its generation
  // (the next one is higher), and its node refuses another generation of the id until it is
  // gone, so the ordinal is started again only then.
  bool stopping = false;
};

enum class NodeLiveness : uint8_t { kAlive, kSuspect, kDead, kLeft };

// The scheduler's view of one node: membership state and the node agent's latest report.
struct NodeStatus {
  NodeInventory inventory;
  NodeLiveness liveness = NodeLiveness::kAlive;
  absl::Time liveness_since = absl::InfinitePast();  // when it entered `liveness`
  // The node agent's process incarnation (the daemon's starting incarnation). SWIM refutations
  // do not change it; a restart does. `replicas` and `staged_models` belong to this boot.
  uint64_t boot_id = 0;
  bool reported = false;  // false until a report from this boot arrived: holds nothing yet
  std::vector<ReplicaRecord> replicas;
  std::set<std::string> staged_models;  // WeightsKey()s whose weights are on local disk
};

struct DesiredDeployment {
  InferenceReplicaSpec spec;
  uint64_t replica_bytes = 0;  // ReplicaBytesForSpec
  // The highest generation of each ordinal the caller has seen reported: a replica stopped and
  // gone is no longer reported, and its ordinal's next generation must still be higher.
  std::map<int, uint64_t> generations_seen;
  // Replicas beyond spec.replicas a rising trend is likely to add (AutoscaleDecision::ahead):
  // the nodes placement would give them pre-stage the weights now (at most
  // kMaxPrestageAhead; docs/architecture.md#autoscaling).
  int prestage_ahead = 0;
};
inline constexpr int kMaxPrestageAhead = 256;

// "llama-13b@v1": what a node pre-stages.
std::string WeightsKey(const InferenceReplicaSpec& spec);

enum class ActionKind : uint8_t { kStart, kStop, kPrestage };
std::string_view ActionKindName(ActionKind kind);

// Why an action replaces a replica that still serves: the start of its surge copy, or the stop
// of a restart in place. kNone for every other action.
enum class Replacement : uint8_t { kNone, kMaxLifetime, kMemoryLeak };
// "max lifetime", "memory leak": the cause as the action's reason says it.
std::string_view ReplacementCause(Replacement r);
// "max_lifetime", "memory_leak": the metric label.
std::string_view ReplacementLabel(Replacement r);

struct Action {
  ActionKind kind = ActionKind::kStart;
  std::string node;
  std::string deployment;  // kPrestage: the deployment whose wave needs the weights
  int ordinal = 0;
  uint64_t generation = 0;
  Allocation allocation;  // kStart
  std::string weights;    // kStart, kPrestage: WeightsKey
  std::string reason;
  Replacement replacement = Replacement::kNone;
  std::string replica_id() const { return ReplicaId(deployment, ordinal); }
};

struct DeploymentStatus {
  std::string name;
  int desired = 0;
  int present = 0;  // replicas that count (ready, starting, or on a node within its grace)
  int ready = 0;
  int lost = 0;               // counted, but on a suspected or recently dead node
  int ready_lost = 0;         // of `ready`, those on a suspected or recently dead node
  int failed = 0;             // failed and held in place until their crash backoff has passed
  int lifetime_restarts = 0;  // restarted this step for outliving spec.maxLifetime (surge or stop)
  int leak_restarts = 0;      // restarted this step for a flagged memory leak (surge or stop)
  int surging = 0;            // surge copies starting beside the ready replica they replace
  int wave = 0;               // 1-based bring-up wave the deployment is in
  int wave_target = 0;
  int starting_now = 0;
  int waiting_for_weights = 0;  // placed this step, held until weights are pre-staged
  int pending = 0;              // could not be placed this step
  std::string pending_reason;
};

// What a scheduler remembers across steps for DesiredDeployment::generations_seen: the highest
// generation reported per track and ordinal (ordinals of 100000 and above are not kept: a bound).
class GenerationMemory {
 public:
  void Note(const ReplicaRecord& record);
  // Fills each deployment's generations_seen and forgets the tracks none of them names.
  void Attach(std::vector<DesiredDeployment>& desired);

 private:
  absl::flat_hash_map<std::string, std::map<int, uint64_t>> seen_;  // track → ordinal → gen
};

struct ReconcileResult {
  std::vector<Action> actions;
  std::vector<DeploymentStatus> deployments;
};

ReconcileResult Reconcile(absl::Time now, const std::vector<DesiredDeployment>& desired,
                          const std::vector<NodeStatus>& nodes, const PlacementOptions& options);

// How long a replica may stay ready under spec.maxLifetime: 90-100 % of it, fixed per replica id
// and generation (the same on every reconciler), so a fleet started together restarts spread
// out (docs/architecture.md#leak-detection). Infinite when maxLifetime is 0.
absl::Duration JitteredLifetime(const InferenceReplicaSpec& spec, std::string_view replica_id,
                                uint64_t generation);

// How long a failed replica of `generation` stays failed before it is stopped and recreated
// (docs/operations.md#troubleshooting: a crash loop must neither hammer its node nor hide its
// cause): 10 s, doubling with each generation, at most 5 min.
absl::Duration CrashBackoff(uint64_t generation);

// How many replicas may exist once `ready` of them are ready: the end of the current wave.
int WaveTarget(const InferenceReplicaSpec& spec, int ready);

}  // namespace exa::scheduler
