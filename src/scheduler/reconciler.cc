#include "scheduler/reconciler.h"

#include <algorithm>
#include <map>

#include "common/strings.h"
#include "common/units.h"

namespace exa::scheduler {
namespace {

struct Located {
  const ReplicaRecord* record;
  const NodeStatus* node;
};

// Whether a replica on `node` still counts for a deployment with `grace` (lost vs dead).
bool Counts(const NodeStatus& node, absl::Time now, absl::Duration grace) {
  if (!node.reported) return false;
  switch (node.liveness) {
    case NodeLiveness::kAlive:
    case NodeLiveness::kSuspect:
      return true;
    case NodeLiveness::kDead:
      return now - node.liveness_since < grace;
    case NodeLiveness::kLeft:
      return false;
  }
  return false;
}

bool Reachable(const NodeStatus& node) { return node.liveness == NodeLiveness::kAlive; }

// An autoscaled deployment's ordinals from minReplicas up are elastic: placed packed, so that the
// scale-down, which stops the highest ordinals, empties whole nodes.
bool Elastic(const InferenceReplicaSpec& spec, int ordinal) {
  return spec.autoscaling.enabled && ordinal >= spec.autoscaling.min_replicas;
}

// Of two replicas with one id: higher generation, then ready, then the lower node id.
bool Better(const Located& a, const Located& b) {
  if (a.record->generation != b.record->generation) {
    return a.record->generation > b.record->generation;
  }
  bool ra = a.record->phase == ReplicaPhase::kReady, rb = b.record->phase == ReplicaPhase::kReady;
  if (ra != rb) return ra;
  return a.node->inventory.id < b.node->inventory.id;
}

Action Stop(const Located& r, std::string reason) {
  Action a;
  a.kind = ActionKind::kStop;
  a.node = r.node->inventory.id;
  a.deployment = r.record->deployment;
  a.ordinal = r.record->ordinal;
  a.generation = r.record->generation;
  a.allocation = r.record->allocation;
  a.reason = std::move(reason);
  return a;
}

class Step {
 public:
  Step(absl::Time now, const std::vector<DesiredDeployment>& desired,
       const std::vector<NodeStatus>& nodes, const PlacementOptions& options)
      : now_(now), desired_(desired), nodes_(nodes), options_(options) {}

  ReconcileResult Run();

 private:
  void Collect();
  // What a deployment's replicas are this step.
  struct Sorted {
    std::map<int, Located> keepers;       // ordinal → the replica that stays
    std::map<int, uint64_t> generations;  // highest seen per ordinal
    std::map<int, Located> surging;       // ordinal → its surge copy, starting
    std::set<int> surge_failed;           // ordinals whose surge copy failed: restart in place
    // Ordinals whose last generation is still draining after a stop on a reachable node that
    // may host it again: the next one starts when it is gone (its node refuses a second
    // generation of one id until then). A drained node's are placed elsewhere at once.
    std::set<int> stopping;
  };
  void Deployment(const DesiredDeployment& d);
  std::map<int, uint64_t> ReadyGenerations(const InferenceReplicaSpec& spec);
  Sorted Sort(const DesiredDeployment& d, DeploymentStatus& status);
  void Keep(const Located& l, std::map<int, Located>& keepers);
  void Replace(const DesiredDeployment& d, Sorted& s, DeploymentStatus& status);
  void Tally(const DesiredDeployment& d, Sorted& s, DeploymentStatus& status);
  // What placement needs of the deployment: its replica size and shape, and where its `keepers`
  // (and `more`, placed this step) are.
  PlacementRequest Request(const DesiredDeployment& d, const std::map<int, Located>& keepers,
                           const std::vector<Allocation>& more = {}) const;
  // Places the missing `ordinals`; returns where they go (also while waiting for weights).
  std::vector<Allocation> PlaceMissing(const DesiredDeployment& d, const std::vector<int>& ordinals,
                                       const std::map<int, Located>& keepers,
                                       const std::map<int, uint64_t>& gens,
                                       DeploymentStatus& status);
  // Pre-stages the nodes of the next d.prestage_ahead replicas: a dry run of placement.
  void PrestageAhead(const DesiredDeployment& d, const std::map<int, Located>& keepers,
                     const std::vector<Allocation>& placed_now);
  // Starts a surge copy of `keeper` (generation `generation`) on another node, for `cause`,
  // and counts it in `restarts`; false when no node has room. While its node lacks the weights
  // it asks for them and returns true (the copy starts once staged).
  bool Surge(const DesiredDeployment& d, const Located& keeper, uint64_t generation,
             const std::map<int, Located>& keepers, Replacement cause, int& restarts);
  // Asks for `weights` on `node` once per step (for `deployment`); true when the node has them.
  bool Staged(const NodeStatus& node, const std::string& weights, const std::string& deployment,
              const std::string& reason);

  absl::Time now_;
  const std::vector<DesiredDeployment>& desired_;
  const std::vector<NodeStatus>& nodes_;
  const PlacementOptions& options_;
  std::vector<NodeInventory> usable_;  // alive nodes with a report: where new replicas may go
  MemoryLedger ledger_;
  std::map<std::string, std::vector<Located>> by_deployment_;
  std::set<std::string> prestaged_;  // (node, weights) already asked this step
  ReconcileResult result_;
};

void Step::Collect() {
  std::set<std::string> known;
  for (const DesiredDeployment& d : desired_) known.insert(d.spec.name);
  const std::string* last = nullptr;        // a node's replicas mostly share a deployment:
  std::vector<Located>* located = nullptr;  // its list, looked up once for the run
  for (const NodeStatus& n : nodes_) {
    if (n.liveness == NodeLiveness::kAlive && n.reported) usable_.push_back(n.inventory);
    if (!n.reported) continue;
    for (const ReplicaRecord& r : n.replicas) {
      Located l{&r, &n};
      if (last == nullptr || *last != r.deployment) {
        last = &r.deployment;
        located = known.count(r.deployment) ? &by_deployment_[r.deployment] : nullptr;
      }
      if (located == nullptr) {
        if (Reachable(n) && !r.stopping) result_.actions.push_back(Stop(l, "deployment deleted"));
        if (n.liveness != NodeLiveness::kLeft) ledger_.Reserve(r.allocation);
        continue;
      }
      located->push_back(l);
    }
  }
  // Memory held by every replica that still counts, before any deployment places new ones.
  for (const DesiredDeployment& d : desired_) {
    for (const Located& l : by_deployment_[d.spec.name]) {
      if (Counts(*l.node, now_, d.spec.dead_grace)) ledger_.Reserve(l.record->allocation);
    }
  }
}

void Step::Deployment(const DesiredDeployment& d) {
  DeploymentStatus status;
  status.name = d.spec.name;
  status.desired = d.spec.replicas;
  Sorted s = Sort(d, status);
  Replace(d, s, status);
  Tally(d, s, status);
}

// The lowest ready generation per ordinal that stays (not on a draining node): a newer one beside
// it that is still starting is its surge copy (max lifetime), which it keeps serving for until
// the copy is ready.
std::map<int, uint64_t> Step::ReadyGenerations(const InferenceReplicaSpec& spec) {
  std::map<int, uint64_t> ready_generation;
  for (const Located& l : by_deployment_[spec.name]) {
    if (l.record->phase != ReplicaPhase::kReady || l.record->stopping ||
        !Counts(*l.node, now_, spec.dead_grace) || !Reachable(*l.node) ||
        l.node->inventory.draining) {
      continue;
    }
    auto [it, inserted] = ready_generation.emplace(l.record->ordinal, l.record->generation);
    if (!inserted) it->second = std::min(it->second, l.record->generation);
  }
  return ready_generation;
}

// Each replica of the deployment kept, stopped (scale down, drained, failed past its backoff,
// a duplicate), or set apart (a surge copy, a generation still draining).
Step::Sorted Step::Sort(const DesiredDeployment& d, DeploymentStatus& status) {
  const InferenceReplicaSpec& spec = d.spec;
  const std::map<int, uint64_t> ready = ReadyGenerations(spec);
  Sorted s;
  s.generations = d.generations_seen;  // highest seen per ordinal
  for (const Located& l : by_deployment_[spec.name]) {
    uint64_t& g = s.generations[l.record->ordinal];
    g = std::max(g, l.record->generation);
    if (!Counts(*l.node, now_, spec.dead_grace)) continue;  // dead past its grace: rebuild
    if (l.record->stopping) {
      if (Reachable(*l.node) && !l.node->inventory.draining) s.stopping.insert(l.record->ordinal);
      continue;
    }
    auto older = ready.find(l.record->ordinal);
    const bool beside_ready = older != ready.end() && older->second < l.record->generation &&
                              l.record->ordinal >= 0 && l.record->ordinal < spec.replicas;
    if (beside_ready && l.record->phase == ReplicaPhase::kFailed) {
      // A surge copy that failed: it goes, the ready one keeps serving and restarts in place.
      if (Reachable(*l.node)) result_.actions.push_back(Stop(l, "surge copy failed"));
      s.surge_failed.insert(l.record->ordinal);
      continue;
    }
    if (beside_ready && l.record->phase == ReplicaPhase::kStarting) {
      s.surging.emplace(l.record->ordinal, l);
      continue;
    }
    if (l.node->inventory.draining) {
      // The drain checked the availability floor when the operator asked; the ordinal is placed
      // again elsewhere in this step.
      if (Reachable(*l.node)) result_.actions.push_back(Stop(l, "node drained"));
      continue;
    }
    if (l.record->ordinal < 0 || l.record->ordinal >= spec.replicas) {
      if (Reachable(*l.node)) result_.actions.push_back(Stop(l, "scale down"));
      continue;
    }
    if (l.record->phase == ReplicaPhase::kFailed) {
      absl::Duration backoff = CrashBackoff(l.record->generation);
      if (now_ - l.record->phase_since < backoff) {
        status.failed++;  // holds its ordinal and memory until the backoff has passed
      } else {
        if (Reachable(*l.node)) {
          result_.actions.push_back(
              Stop(l, StrCat("failed; recreated after ", DurationToString(backoff))));
        }
        continue;
      }
    }
    Keep(l, s.keepers);
  }
  return s;
}

// Of two replicas of one ordinal the better stays (Better) and the other is stopped.
void Step::Keep(const Located& l, std::map<int, Located>& keepers) {
  auto [it, inserted] = keepers.emplace(l.record->ordinal, l);
  if (inserted) return;
  Located loser = l;
  if (Better(l, it->second)) std::swap(loser, it->second);
  if (Reachable(*loser.node)) {
    const bool replaced = loser.record->phase == ReplicaPhase::kReady &&
                          it->second.record->phase == ReplicaPhase::kReady;
    result_.actions.push_back(
        Stop(loser, StrCat(replaced ? "replaced by generation " : "duplicate: generation ",
                           it->second.record->generation, " on ", it->second.node->inventory.id,
                           replaced ? "" : " wins")));
  }
}

// Replicas to replace while they serve: those past their max lifetime, and those leak detection
// flagged (ReplicaRecord::leaking), the leaking first.
void Step::Replace(const DesiredDeployment& d, Sorted& s, DeploymentStatus& status) {
  const InferenceReplicaSpec& spec = d.spec;
  int ready = 0;
  struct Expired {
    absl::Duration overdue;
    int ordinal = 0;
    Replacement cause = Replacement::kMaxLifetime;
  };
  std::vector<Expired> expired;
  for (const auto& [o, l] : s.keepers) {
    if (l.record->phase != ReplicaPhase::kReady || !Reachable(*l.node)) continue;
    ready++;
    if (l.record->leaking) {
      expired.push_back({absl::InfiniteDuration(), o, Replacement::kMemoryLeak});
      continue;
    }
    if (spec.max_lifetime <= absl::ZeroDuration()) continue;
    absl::Duration life = JitteredLifetime(spec, ReplicaId(spec.name, o), l.record->generation);
    absl::Duration age = now_ - l.record->phase_since;
    if (age >= life) expired.push_back({age - life, o, Replacement::kMaxLifetime});
  }
  if (!expired.empty()) {
    // Make before break: a surge copy on another node where memory allows (at most
    // maxUnavailable copies at once), so the ordinal never stops serving; otherwise, or after
    // its copy failed, stop-then-start within the maxUnavailable budget. Copies only while
    // every ordinal is present: memory a missing replica needs (a restart, a rebuild) is not
    // taken by a copy.
    bool complete = static_cast<int>(s.keepers.size()) == spec.replicas;
    int surge_budget = MaxUnavailable(spec) - static_cast<int>(s.surging.size());
    int budget = MaxUnavailable(spec) - (spec.replicas - ready);
    std::sort(expired.begin(), expired.end(), [](const Expired& a, const Expired& b) {
      return a.overdue > b.overdue || (a.overdue == b.overdue && a.ordinal < b.ordinal);
    });
    for (const Expired& e : expired) {
      const int o = e.ordinal;
      int& restarts =
          e.cause == Replacement::kMemoryLeak ? status.leak_restarts : status.lifetime_restarts;
      if (s.surging.count(o) > 0) continue;  // its copy is starting
      if (complete && s.surge_failed.count(o) == 0) {
        if (surge_budget <= 0) continue;  // waits for one of the copies in flight
        if (Surge(d, s.keepers.at(o), s.generations[o] + 1, s.keepers, e.cause, restarts)) {
          surge_budget--;
          continue;
        }
      }
      if (budget-- <= 0) break;
      Action stop = Stop(s.keepers.at(o), std::string(ReplacementCause(e.cause)));
      stop.replacement = e.cause;
      result_.actions.push_back(std::move(stop));
      s.keepers.erase(o);
      s.stopping.insert(o);  // started again once its node reports it gone
      complete = false;
      restarts++;
    }
  }
}

// The deployment's figures, and placements for its missing ordinals within the current wave.
void Step::Tally(const DesiredDeployment& d, Sorted& s, DeploymentStatus& status) {
  const InferenceReplicaSpec& spec = d.spec;
  status.surging = static_cast<int>(s.surging.size());
  std::vector<int> missing;
  for (int o = 0; o < spec.replicas; ++o) {
    auto it = s.keepers.find(o);
    if (it == s.keepers.end()) {
      if (s.stopping.count(o) == 0) missing.push_back(o);
      continue;
    }
    status.present++;
    const bool ready = it->second.record->phase == ReplicaPhase::kReady;
    if (ready) status.ready++;
    if (!Reachable(*it->second.node)) {
      status.lost++;
      if (ready) status.ready_lost++;
    }
  }
  status.wave_target = WaveTarget(spec, status.ready);
  int first = std::max(1, std::min(spec.replicas, spec.scheduling.warmup_replicas > 0
                                                      ? spec.scheduling.warmup_replicas
                                                      : spec.scheduling.batch_size));
  status.wave = status.wave_target <= first
                    ? 1
                    : 2 + (status.wave_target - first - 1) / spec.scheduling.batch_size;
  int room = std::max(0, status.wave_target - status.present);
  if (static_cast<int>(missing.size()) > room) missing.resize(room);
  std::vector<Allocation> placed_now;
  if (!missing.empty()) placed_now = PlaceMissing(d, missing, s.keepers, s.generations, status);
  PrestageAhead(d, s.keepers, placed_now);
  result_.deployments.push_back(std::move(status));
}

PlacementRequest Step::Request(const DesiredDeployment& d, const std::map<int, Located>& keepers,
                               const std::vector<Allocation>& more) const {
  const InferenceReplicaSpec& spec = d.spec;
  PlacementRequest request;
  request.deployment = spec.name;
  request.replica_bytes = d.replica_bytes;
  request.min_gpus = spec.resources.gpu;
  request.device_kind = DeviceKindForBackend(spec.backend);
  request.topology = spec.topology;
  for (const auto& [o, l] : keepers) request.existing_per_node[l.node->inventory.id]++;
  for (const Allocation& a : more) request.existing_per_node[a.node]++;
  const std::string weights = WeightsKey(spec);
  for (const NodeStatus& n : nodes_) {
    if (n.staged_models.count(weights)) request.staged_nodes.insert(n.inventory.id);
  }
  return request;
}

std::vector<Allocation> Step::PlaceMissing(const DesiredDeployment& d,
                                           const std::vector<int>& ordinals,
                                           const std::map<int, Located>& keepers,
                                           const std::map<int, uint64_t>& generations,
                                           DeploymentStatus& status) {
  const InferenceReplicaSpec& spec = d.spec;
  PlacementRequest request = Request(d, keepers);
  request.count = static_cast<int>(ordinals.size());
  // Ordinals ascend, so the elastic ones are the last.
  request.pack_last = static_cast<int>(
      std::count_if(ordinals.begin(), ordinals.end(), [&](int o) { return Elastic(spec, o); }));
  const std::string weights = WeightsKey(spec);
  PlacementResult placed = Place(usable_, ledger_, request, options_);
  status.pending = placed.unplaced;
  status.pending_reason = placed.reason;
  std::map<std::string, const NodeStatus*> by_id;
  for (const NodeStatus& n : nodes_) by_id[n.inventory.id] = &n;
  bool all_staged = true;
  for (const Allocation& a : placed.placed) {
    if (!Staged(*by_id.at(a.node), weights, spec.name,
                StrCat("wave ", status.wave, " of ", spec.name))) {
      all_staged = false;
    }
  }
  if (!all_staged) {
    status.waiting_for_weights = static_cast<int>(placed.placed.size());
    return placed.placed;
  }
  for (size_t i = 0; i < placed.placed.size(); ++i) {
    Action s;
    s.kind = ActionKind::kStart;
    s.node = placed.placed[i].node;
    s.deployment = spec.name;
    s.ordinal = ordinals[i];
    auto g = generations.find(s.ordinal);
    s.generation = (g == generations.end() ? 0 : g->second) + 1;
    s.allocation = placed.placed[i];
    s.weights = weights;
    s.reason = g == generations.end() ? StrCat("wave ", status.wave) : "rebuild";
    result_.actions.push_back(std::move(s));
  }
  status.starting_now = static_cast<int>(placed.placed.size());
  return placed.placed;
}

void Step::PrestageAhead(const DesiredDeployment& d, const std::map<int, Located>& keepers,
                         const std::vector<Allocation>& placed_now) {
  const int ahead = std::min(d.prestage_ahead, kMaxPrestageAhead);
  if (ahead <= 0) return;
  const InferenceReplicaSpec& spec = d.spec;
  PlacementRequest request = Request(d, keepers, placed_now);
  request.count = ahead;
  for (int o = spec.replicas; o < spec.replicas + ahead; ++o) request.pack_last += Elastic(spec, o);
  MemoryLedger scratch = ledger_;  // a dry run: nothing is reserved
  const std::string weights = WeightsKey(spec);
  const std::string reason =
      StrCat("load rising: ", ahead, " more replicas of ", spec.name, " likely");
  std::set<std::string> nodes;
  for (const Allocation& a : Place(usable_, scratch, request, options_).placed)
    nodes.insert(a.node);
  for (const NodeStatus& n : nodes_) {
    if (nodes.count(n.inventory.id)) Staged(n, weights, spec.name, reason);
  }
}

bool Step::Staged(const NodeStatus& node, const std::string& weights, const std::string& deployment,
                  const std::string& reason) {
  if (node.staged_models.count(weights)) return true;
  if (prestaged_.insert(StrCat(node.inventory.id, "\n", weights)).second) {
    Action p;
    p.kind = ActionKind::kPrestage;
    p.node = node.inventory.id;
    p.deployment = deployment;
    p.weights = weights;
    p.reason = reason;
    result_.actions.push_back(std::move(p));
  }
  return false;
}

bool Step::Surge(const DesiredDeployment& d, const Located& keeper, uint64_t generation,
                 const std::map<int, Located>& keepers, Replacement cause, int& restarts) {
  const InferenceReplicaSpec& spec = d.spec;
  PlacementRequest request = Request(d, keepers);
  request.count = 1;
  request.avoid_nodes = {keeper.node->inventory.id};
  request.pack_last = Elastic(spec, keeper.record->ordinal) ? 1 : 0;
  PlacementResult placed = Place(usable_, ledger_, request, options_);
  if (placed.placed.empty()) return false;
  const Allocation& a = placed.placed.front();
  const std::string weights = WeightsKey(spec);
  for (const NodeStatus& n : nodes_) {
    if (n.inventory.id != a.node) continue;
    if (!Staged(n, weights, spec.name,
                StrCat("a surge copy of ", spec.name, " (", ReplacementCause(cause), ")"))) {
      return true;
    }
  }
  Action s;
  s.kind = ActionKind::kStart;
  s.node = a.node;
  s.deployment = spec.name;
  s.ordinal = keeper.record->ordinal;
  s.generation = generation;
  s.allocation = a;
  s.weights = weights;
  s.reason = StrCat(ReplacementCause(cause), ": surge copy of generation ",
                    keeper.record->generation, " on ", keeper.node->inventory.id);
  s.replacement = cause;
  result_.actions.push_back(std::move(s));
  restarts++;
  return true;
}

ReconcileResult Step::Run() {
  Collect();
  std::vector<const DesiredDeployment*> order;
  for (const DesiredDeployment& d : desired_) order.push_back(&d);
  std::sort(order.begin(), order.end(), [](const DesiredDeployment* a, const DesiredDeployment* b) {
    return a->spec.name < b->spec.name;
  });
  for (const DesiredDeployment* d : order) Deployment(*d);
  return std::move(result_);
}

}  // namespace

std::string_view ReplicaPhaseName(ReplicaPhase phase) {
  switch (phase) {
    case ReplicaPhase::kStarting:
      return "starting";
    case ReplicaPhase::kReady:
      return "ready";
    case ReplicaPhase::kFailed:
      return "failed";
  }
  return "?";
}

std::string_view ActionKindName(ActionKind kind) {
  switch (kind) {
    case ActionKind::kStart:
      return "start";
    case ActionKind::kStop:
      return "stop";
    case ActionKind::kPrestage:
      return "prestage";
  }
  return "?";
}

void GenerationMemory::Note(const ReplicaRecord& record) {
  constexpr int kMaxOrdinal = 100'000;
  if (record.ordinal < 0 || record.ordinal >= kMaxOrdinal) return;
  uint64_t& seen = seen_[record.deployment][record.ordinal];
  seen = std::max(seen, record.generation);
}

void GenerationMemory::Attach(std::vector<DesiredDeployment>& desired) {
  std::set<std::string> named;
  for (DesiredDeployment& d : desired) {
    named.insert(d.spec.name);
    auto it = seen_.find(d.spec.name);
    if (it != seen_.end()) d.generations_seen = it->second;
  }
  absl::erase_if(seen_, [&](const auto& track) { return named.count(track.first) == 0; });
}

std::string_view ReplacementCause(Replacement r) {
  switch (r) {
    case Replacement::kNone:
      return "";
    case Replacement::kMaxLifetime:
      return "max lifetime";
    case Replacement::kMemoryLeak:
      return "memory leak";
  }
  return "";
}

std::string_view ReplacementLabel(Replacement r) {
  switch (r) {
    case Replacement::kNone:
      return "";
    case Replacement::kMaxLifetime:
      return "max_lifetime";
    case Replacement::kMemoryLeak:
      return "memory_leak";
  }
  return "";
}

std::string ReplicaId(std::string_view deployment, int ordinal) {
  return StrCat(deployment, "-", ordinal);
}

std::string WeightsKey(const InferenceReplicaSpec& spec) {
  return StrCat(spec.model, "@", spec.version);
}

absl::Duration JitteredLifetime(const InferenceReplicaSpec& spec, std::string_view replica_id,
                                uint64_t generation) {
  if (spec.max_lifetime <= absl::ZeroDuration()) return absl::InfiniteDuration();
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across builds and machines
  for (char c : replica_id) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  h = (h ^ generation) * 1099511628211ull;
  const double fraction = 0.9 + 0.1 * static_cast<double>(h % 10007) / 10007.0;
  return spec.max_lifetime * fraction;
}

absl::Duration CrashBackoff(uint64_t generation) {
  uint64_t doublings = std::min<uint64_t>(generation > 0 ? generation - 1 : 0, 5);
  return std::min(absl::Seconds(10) * (uint64_t{1} << doublings), absl::Minutes(5));
}

int WaveTarget(const InferenceReplicaSpec& spec, int ready) {
  const int n = spec.replicas;
  if (n <= 0) return 0;
  const int batch = std::max(1, spec.scheduling.batch_size);
  int target =
      std::min(n, spec.scheduling.warmup_replicas > 0 ? spec.scheduling.warmup_replicas : batch);
  while (target < n && ready >= target) target = std::min(n, target + batch);
  return target;
}

ReconcileResult Reconcile(absl::Time now, const std::vector<DesiredDeployment>& desired,
                          const std::vector<NodeStatus>& nodes, const PlacementOptions& options) {
  return Step(now, desired, nodes, options).Run();
}

}  // namespace exa::scheduler
