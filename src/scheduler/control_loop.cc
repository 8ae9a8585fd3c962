#include "scheduler/control_loop.h"

#include <algorithm>
#include <cmath>

#include "common/logging.h"
#include "common/strings.h"
#include "fmt/format.h"
#include "scheduler/node_view.h"

namespace exa::scheduler {
namespace {

ReplicaPhase PhaseOf(const std::string& state) {
  if (state == "ready" || state == "unhealthy") return ReplicaPhase::kReady;
  if (state == "failed") return ReplicaPhase::kFailed;
  return ReplicaPhase::kStarting;
}

// "<deployment>-<ordinal>" back into its parts; false when `id` is not of that form.
bool ParseReplicaId(const std::string& id, std::string* deployment, int* ordinal) {
  size_t dash = id.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == id.size() || id.size() - dash > 8) {
    return false;
  }
  int n = 0;
  for (size_t i = dash + 1; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return false;
    n = n * 10 + (id[i] - '0');
  }
  *deployment = id.substr(0, dash);
  *ordinal = n;
  return true;
}

// The parts of a track's status that add up into its spec's.
void AddTrack(const DeploymentStatus& t, DeploymentStatus& s) {
  s.present += t.present;
  s.ready += t.ready;
  s.lost += t.lost;
  s.ready_lost += t.ready_lost;
  s.failed += t.failed;
  s.wave = std::max(s.wave, t.wave);
  s.wave_target += t.wave_target;
  s.starting_now += t.starting_now;
  s.waiting_for_weights += t.waiting_for_weights;
  s.pending += t.pending;
  if (!t.pending_reason.empty()) s.pending_reason = t.pending_reason;
}

}  // namespace

ControlLoop::ControlLoop(ControlLoopOptions options)
    : options_(std::move(options)), catalog_(ModelCatalog::WithPresets()), leaks_(options_.leaks) {}

void ControlLoop::ObserveMembers(absl::Time now, const std::vector<membership::Member>& members) {
  MergeView(now, members, nodes_);
}

void ControlLoop::Reset() {
  leaks_ = LeakDetector(options_.leaks);
  status_.clear();
  reconciler_.clear();
}

const std::deque<ControlLoop::Event>* ControlLoop::events(const std::string& deployment) const {
  auto it = events_.find(deployment);
  return it == events_.end() ? nullptr : &it->second;
}

void ControlLoop::AddEvent(absl::Time now, const std::string& deployment, std::string message) {
  Record(now, deployment, std::move(message), /*rollout=*/false);
}

void ControlLoop::Record(absl::Time now, const std::string& deployment, std::string message,
                         bool rollout) {
  if (step_ != nullptr) step_->events.push_back({deployment, message, rollout});
  std::deque<Event>& q = events_[deployment];
  q.push_back({now, std::move(message)});
  while (q.size() > options_.max_events) q.pop_front();
}

void ControlLoop::ActionFailed(absl::Time now, const std::string& deployment,
                               const std::string& what, const std::string& error) {
  EXA_LOG_WARN("scheduler", "action failed", {{"action", what}, {"error", error}});
  AddEvent(now, deployment, StrCat(what, " failed: ", error));
}

void ControlLoop::PrestageFailed(absl::Time now, const std::string& deployment,
                                 const std::string& what, const std::string& error) {
  if (prestage_failures_.size() > 10'000) prestage_failures_.clear();
  std::string& last = prestage_failures_[what];
  if (last == error) return;
  last = error;
  EXA_LOG_WARN("scheduler", "pre-staging failed", {{"action", what}, {"error", error}});
  AddEvent(now, deployment, StrCat(what, " failed: ", error));
}

const ControlLoop::CachedSpec& ControlLoop::Spec(const StoreRecord& record) {
  auto it = specs_.find(record.key);
  if (it != specs_.end() && it->second.version == record.version) return it->second;
  CachedSpec c{record.version, absl::UnknownError("")};
  auto specs = ParseSpecs(record.value, record.key);
  if (!specs.ok()) {
    c.desired = specs.status();
  } else if (specs->size() != 1) {
    c.desired = absl::DataLossError(StrCat(record.key, " holds ", specs->size(), " specs"));
  } else {
    // Apply planned the spec before storing it; a model learned by another scheduler is found
    // here only when its shape is known (presets, or looked up on Apply / first use).
    auto bytes = catalog_.Find(specs->front().model).ok()
                     ? ReplicaBytesForSpec(specs->front(), catalog_)
                     : absl::StatusOr<uint64_t>(absl::NotFoundError("model shape not loaded"));
    if (bytes.ok()) {
      c.desired = DesiredDeployment{specs->front(), *bytes};
    } else {
      c.desired = bytes.status();
    }
  }
  return specs_.insert_or_assign(record.key, std::move(c)).first->second;
}

ControlLoop::Specs ControlLoop::SpecsIn(const StoreRecords& state) {
  Specs specs;
  std::set<std::string> keys;
  for (auto it = state.lower_bound(std::string(kSpecPrefix));
       it != state.end() && it->first.rfind(kSpecPrefix, 0) == 0; ++it) {
    keys.insert(it->first);
    const CachedSpec& c = Spec(it->second);
    const std::string name = it->first.substr(kSpecPrefix.size());
    if (!c.desired.ok()) {
      DeploymentStatus& st = status_[name];
      st.name = name;
      st.pending_reason = std::string(c.desired.status().message());
      continue;
    }
    specs[name] = &*c.desired;
  }
  std::erase_if(specs_, [&keys](const auto& kv) { return !keys.count(kv.first); });
  return specs;
}

ControlOutput ControlLoop::Step(const ControlInput& in) {
  ControlOutput out;
  step_ = &out;
  StepInto(in, out);
  step_ = nullptr;
  return out;
}

void ControlLoop::StepInto(const ControlInput& in, ControlOutput& out) {
  MergeView(in.now, *in.members, nodes_);
  const Specs specs = SpecsIn(*in.state);
  const std::vector<cluster::LabelRule> rules = LabelRulesIn(*in.state);
  ReadyByVersion ready_by_version;
  loads_.clear();
  for (const NodeReport& report : in.reports) {
    TakeReport(in.now, report, specs, rules, out, ready_by_version);
  }
  ForgetUnseen(in.now);
  if (in.leader != reconciler_) {
    EXA_LOG_INFO("scheduler", "reconciler",
                 {{"node", in.leader.empty() ? "none (no Raft leader in view)" : in.leader},
                  {"term", static_cast<int64_t>(in.term)}});
    reconciler_ = in.leader;
  }
  std::vector<DesiredDeployment> desired = Tracks(in, specs, ready_by_version, out);
  generations_.Attach(desired);
  std::set<std::string> weights;
  Specs by_track;
  for (const DesiredDeployment& d : desired) {
    weights.insert(WeightsKey(d.spec));
    by_track[d.spec.name] = &d;
  }
  std::vector<NodeStatus> statuses = NodeStatuses(*in.state, weights);
  const ReconcileResult result = Reconcile(in.now, desired, statuses, options_.placement);
  for (NodeStatus& st : statuses) {  // a node that does not answer next step keeps its report
    nodes_[st.inventory.id].replicas = std::move(st.replicas);
  }
  Summarize(in, specs, result, out);
  if (!in.acting) {
    out.relabels.clear();
    return;
  }
  Announce(in.now, result, by_track, rules, out);
}

void ControlLoop::TakeReport(absl::Time now, const NodeReport& report, const Specs& specs,
                             const std::vector<cluster::LabelRule>& rules, ControlOutput& out,
                             ReadyByVersion& ready_by_version) {
  NodeStatus& st = nodes_[report.node];
  st.reported = true;
  st.boot_id = report.boot_id;
  NodeWeights& w = node_weights_[report.node];
  w.pulls_models = report.pulls_models;
  if (w.staged != report.staged_models) {
    w.staged = report.staged_models;
    for (const std::string& m : w.staged) {  // staged: a later need is news again
      prestage_announced_.erase(StrCat(report.node, "\n", m));
      prestage_failures_.erase(StrCat("prestage ", m, " on ", report.node));
    }
  }
  st.replicas.clear();
  st.replicas.reserve(report.replicas.size());
  absl::flat_hash_set<std::string> leak_seen;
  const std::string deployment_label(kDeploymentLabel);
  for (const ReportedReplica& r : report.replicas) {
    auto label = r.labels.find(deployment_label);
    if (label == r.labels.end() || r.state == "stopped") continue;
    ReplicaRecord rec;
    if (!ParseReplicaId(r.replica_id, &rec.deployment, &rec.ordinal) ||
        rec.deployment != label->second) {
      continue;
    }
    rec.generation = r.generation;
    rec.phase = PhaseOf(r.state);
    rec.phase_since = r.state_since;
    rec.allocation.node = report.node;
    rec.allocation.gpus = r.devices.empty() ? std::vector<int>{0} : r.devices;
    const std::string_view spec_name = SpecOfTrack(rec.deployment);
    auto d = specs.find(spec_name);
    const DesiredDeployment* spec = d == specs.end() ? nullptr : d->second;
    const uint64_t k = rec.allocation.gpus.size();  // split as FitReplica splits it
    rec.allocation.bytes_per_gpu = spec == nullptr ? 0 : (spec->replica_bytes + k - 1) / k;
    generations_.Note(rec);
    if (r.state == "draining") {  // holds memory and its generation until it is gone
      rec.stopping = true;
      st.replicas.push_back(std::move(rec));
      continue;
    }
    if (r.state == "ready" || r.state == "unhealthy")
      CatchUpLabels(rules, report.node, spec_name, r, out);
    const std::string key = StrCat(report.node, "/", r.replica_id);
    ReplicaSeen& seen = Seen(now, key);
    if (rec.phase == ReplicaPhase::kReady && r.state == "ready") {
      auto ready = ready_by_version.find(spec_name);
      if (ready == ready_by_version.end())
        ready = ready_by_version.try_emplace(std::string(spec_name)).first;
      ready->second[r.version]++;
      AddLoad(spec_name, r);
      Sample(now, seen, r, spec);
      if (r.memory_bytes > 0) ObserveMemory(now, key, spec_name, r, &leak_seen);
    }
    rec.leaking = options_.recycle_leaking && rec.phase == ReplicaPhase::kReady &&
                  leaks_.Flagged(key, rec.generation);
    if (!SamePhase(seen.phase, r.state, r.reason)) {
      seen.phase = StrCat(r.state, r.reason.empty() ? "" : ": ", r.reason);
      AddEvent(now, std::string(spec_name),
               StrCat(r.replica_id, " on ", report.node, " (generation ", rec.generation,
                      "): ", seen.phase));
    }
    st.replicas.push_back(std::move(rec));
  }
  leaks_.ForgetMissing(StrCat(report.node, "/"), leak_seen);
}

// What the stored rules give a serving replica, against what it has: a node that missed a
// `replica label` (down, partitioned) catches up here. Rules never touch exaserve.io/ keys
// (ValidateChange), so neither does the change.
void ControlLoop::CatchUpLabels(const std::vector<cluster::LabelRule>& rules,
                                const std::string& node, std::string_view spec,
                                const ReportedReplica& r, ControlOutput& out) {
  if (rules.empty() || out.relabels.size() >= options_.max_relabels_per_step) return;
  cluster::LabelRule change = cluster::LabelChange(
      r.labels, cluster::ApplyRules(rules, r.replica_id, r.model, r.version, r.labels));
  if (!change.set.empty() || !change.remove.empty()) {
    out.relabels.push_back({std::string(spec), node, r.replica_id, std::move(change)});
  }
}

void ControlLoop::AddLoad(std::string_view spec, const ReportedReplica& r) {
  auto it = loads_.find(spec);
  if (it == loads_.end()) it = loads_.try_emplace(std::string(spec)).first;
  Load& l = it->second;
  l.ready++;
  l.pending_tokens += std::max<int64_t>(0, r.pending_tokens);
  l.in_flight += std::max(0, r.running_sequences) + std::max(0, r.waiting_sequences);
  if (r.ttft_p99_ms > 0) {
    l.ttft_s += r.ttft_p99_ms / 1000;
    l.ttft_n++;
  }
  if (r.queue_time_p90_ms > 0) {
    l.queue_s += r.queue_time_p90_ms / 1000;
    l.queue_n++;
  }
}

// What the loop remembers of replica `key` ("node/replica"), marked as reported at `now`. Bounded:
// past kMaxSeen entries it starts over (the phases then count as news once more).
ControlLoop::ReplicaSeen& ControlLoop::Seen(absl::Time now, const std::string& key) {
  constexpr size_t kMaxSeen = 100'000;
  if (replicas_seen_.size() >= kMaxSeen && !replicas_seen_.contains(key)) replicas_seen_.clear();
  ReplicaSeen& seen = replicas_seen_[key];
  seen.reported_at = now;
  return seen;
}

// Forgets replicas no report has named for a while (replaced, or on a node long gone).
void ControlLoop::ForgetUnseen(absl::Time now) {
  constexpr absl::Duration kForgetAfter = absl::Minutes(10);
  absl::erase_if(replicas_seen_,
                 [&](const auto& kv) { return now - kv.second.reported_at > kForgetAfter; });
}

bool ControlLoop::SamePhase(std::string_view phase, std::string_view state,
                            std::string_view reason) {
  if (reason.empty()) return phase == state;
  return phase.size() == state.size() + 2 + reason.size() && phase.starts_with(state) &&
         phase.substr(state.size(), 2) == ": " && phase.ends_with(reason);
}

// One sample per replica every observe/20 (1-30 s): the window then holds a whole observation
// period of a large deployment (3072 replicas at 30 s: ~100 a second).
void ControlLoop::Sample(absl::Time now, ReplicaSeen& seen, const ReportedReplica& r,
                         const DesiredDeployment* d) {
  const absl::Duration every =
      d == nullptr ? absl::Seconds(30)
                   : std::clamp(d->spec.rollout.observe / 20, absl::Seconds(1), absl::Seconds(30));
  if (now - seen.sampled_at < every - absl::Milliseconds(100)) return;
  seen.sampled_at = now;
  window_.Add(ReplicaSample{now, r.version,
                            r.inter_token_p99_ms > 0 ? r.inter_token_p99_ms / 1000 : -1,
                            r.recent_finished > 0 ? r.error_rate : -1,
                            r.memory_bytes > 0 ? static_cast<double>(r.memory_bytes) : -1,
                            r.ttft_p99_ms > 0 ? r.ttft_p99_ms / 1000 : -1});
}

void ControlLoop::ObserveMemory(absl::Time now, const std::string& key, std::string_view deployment,
                                const ReportedReplica& r, absl::flat_hash_set<std::string>* seen) {
  seen->insert(key);
  if (!leaks_.Observe(key, r.generation, now, r.memory_bytes)) return;
  const std::string node = key.substr(0, key.find('/'));
  const double growth = leaks_.Growth(key);
  const std::string message = StrCat(
      "memory leak suspected: ", r.replica_id, " on ", node, " (generation ", r.generation,
      ") holds ", r.memory_bytes >> 20, " MiB, ", std::lround(growth * 100),
      "% over its baseline, rising in ", options_.leaks.rising_samples, " samples in a row ",
      absl::FormatDuration(options_.leaks.interval), " apart; ",
      options_.recycle_leaking ? "replacing it (a surge copy on another node where memory allows)"
                               : "reported only (scheduler.leak_action: report)");
  EXA_LOG_WARN("scheduler", "memory leak suspected",
               {{"replica", r.replica_id},
                {"node", node},
                {"memory_bytes", static_cast<int64_t>(r.memory_bytes)},
                {"growth", growth}});
  AddEvent(now, std::string(deployment), message);
}

// Desired state: one track per version of each spec, sized by its rollout (rollout.h). Only the
// reconciler advances a rollout and stores it; the others follow the stored state.
std::vector<DesiredDeployment> ControlLoop::Tracks(const ControlInput& in, const Specs& specs,
                                                   ReadyByVersion& ready, ControlOutput& out) {
  std::vector<DesiredDeployment> desired;
  scaled_.clear();
  autoscaled_.clear();
  std::erase_if(autoscalers_, [&](const auto& kv) {
    auto d = specs.find(kv.first);
    return d == specs.end() || !d->second->spec.autoscaling.enabled;
  });
  std::erase_if(scale_ups_, [&](const auto& kv) { return autoscalers_.count(kv.first) == 0; });
  for (const auto& [name, spec] : specs) {
    RolloutState state = RolloutStateIn(*in.state, name);
    if (in.acting) state = ApplyCommands(in.now, *in.state, spec->spec, std::move(state), out);
    DesiredDeployment scaled;  // an autoscaled spec at the count in force
    const DesiredDeployment* d = spec;
    if (spec->spec.autoscaling.enabled) {
      scaled = *spec;
      scaled.spec.replicas = Autoscale(in, *spec, state, out);
      scaled.prestage_ahead = autoscaled_[name].ahead;
      scaled_[name] = scaled.spec.replicas;
      d = &scaled;
    }
    RolloutStep step = AdvanceRollout(in.now, d->spec, state, ready[name], window_);
    if (in.acting) {
      for (std::string& e : step.events) Record(in.now, name, std::move(e), /*rollout=*/true);
      if (step.rolled_back_now) {
        EXA_LOG_ERROR("scheduler", "rollout rolled back (P1)",
                      {{"deployment", name},
                       {"severity", "P1"},
                       {"version", step.state.failed_version},
                       {"reason", step.state.failure}});
        out.rollbacks.push_back(name);
      }
      const std::string json = RolloutStateToJson(step.state);
      auto stored = in.state->find(StrCat(kRolloutPrefix, name));
      if (stored == in.state->end() || stored->second.value != json) {
        out.writes.emplace_back(StrCat(kRolloutPrefix, name), json);
      }
    }
    for (const auto& [version, count] : step.tracks) {
      DesiredDeployment track = *d;
      track.spec.name = TrackName(name, version);
      track.spec.version = version;
      track.spec.replicas = count;
      if (step.tracks.size() > 1) track.prestage_ahead = 0;  // which version grows is not known
      desired.push_back(std::move(track));
    }
  }
  return desired;
}

int ControlLoop::Autoscale(const ControlInput& in, const DesiredDeployment& d,
                           const RolloutState& rollout, ControlOutput& out) {
  const std::string& name = d.spec.name;
  const AutoscalingSpec& a = d.spec.autoscaling;
  const std::optional<AutoscaleState> stored = AutoscaleStateIn(*in.state, name);
  const int current = stored ? stored->desired : d.spec.replicas;
  auto found = loads_.find(name);
  const Load load = found == loads_.end() ? Load{} : found->second;
  double value = -1;
  if (a.metric == "pendingTokensPerReplica" && load.ready > 0) {
    value = static_cast<double>(load.pending_tokens) / load.ready;
  } else if (a.metric == "ttftP99" && load.ttft_n > 0) {
    value = load.ttft_s / load.ttft_n;
  } else if (a.metric == "queueTimeP90" && load.queue_n > 0) {
    value = load.queue_s / load.queue_n;
  } else if (a.metric != "pendingTokensPerReplica" && load.ready > 0) {
    value = 0;  // ready replicas that served nothing recently: no latency, no load
  }
  const bool observing =
      rollout.phase == RolloutPhase::kProgressing || rollout.phase == RolloutPhase::kObserving;
  // A gateway reports held requests every 2 s while it has them (docs/architecture.md#autoscaling).
  const std::optional<absl::Time> asked = ActivationIn(*in.state, d.spec.model);
  const bool waiting = asked && in.now - *asked <= kActivationFresh;
  const AutoscaleDecision decision = autoscalers_[name].Step(
      d.spec,
      AutoscaleInput{in.now, current, load.ready, value, load.in_flight, observing, waiting});
  AutoscaleReport report{.deployment = name,
                         .desired = decision.desired,
                         .direction = in.acting ? decision.direction : 0,
                         .current = current,
                         .ready = load.ready,
                         .value = value,
                         .panic = decision.panic,
                         .ahead = decision.ahead,
                         .reason = decision.reason};
  TrackScaleUp(in, name, decision.desired, load.ready, report);
  autoscaled_[name] = report;
  out.autoscaled.push_back(report);
  if (!in.acting || (stored && stored->desired == decision.desired)) return decision.desired;
  if (decision.direction != 0) {
    EXA_LOG_INFO("scheduler", "autoscaler decision",
                 {{"deployment", name},
                  {"from", static_cast<int64_t>(current)},
                  {"to", static_cast<int64_t>(decision.desired)},
                  {"reason", decision.reason}});
    Record(in.now, name,
           StrCat("autoscaler: ", current, " -> ", decision.desired, " replicas (", decision.reason,
                  ")"),
           /*rollout=*/false);
  }
  out.writes.emplace_back(
      StrCat(kAutoscalePrefix, name),
      AutoscaleStateToJson({decision.desired, absl::ToUnixMillis(in.now), decision.reason}));
  return decision.desired;
}

void ControlLoop::TrackScaleUp(const ControlInput& in, const std::string& name, int desired,
                               int ready, AutoscaleReport& report) {
  ScaleUp& s = scale_ups_[name];
  const bool waiting = s.since != absl::InfinitePast();
  if (!waiting && s.previous >= 0 && desired > s.previous && ready < desired) {
    s.since = in.now;  // the count rose: a scale-up starts (a crash below the count does not)
    s.to = desired;
  } else if (waiting) {
    s.to = desired;  // raised again (the first start stays: the figure is the whole wait), or cut
  }
  s.previous = desired;
  if (s.since != absl::InfinitePast() && ready >= s.to) {
    s.last_s = absl::ToDoubleSeconds(in.now - s.since);
    s.last_to = s.to;
    s.since = absl::InfinitePast();
    if (in.acting) {
      Record(in.now, name,
             StrCat("autoscaler: ", s.to, " replicas ready ", fmt::format("{:.1f}", s.last_s),
                    " s after the scale-up"),
             /*rollout=*/false);
    }
  }
  report.last_time_to_ready_s = s.last_s;
  report.last_scale_up_to = s.last_to;
}

std::set<std::string> ControlLoop::ActivatableModels() const {
  std::set<std::string> models;
  for (const auto& [key, cached] : specs_) {
    if (!cached.desired.ok()) continue;
    const AutoscalingSpec& a = cached.desired->spec.autoscaling;
    if (a.enabled && a.min_replicas == 0) models.insert(cached.desired->spec.model);
  }
  return models;
}

const AutoscaleReport* ControlLoop::autoscale(const std::string& deployment) const {
  auto it = autoscaled_.find(deployment);
  return it == autoscaled_.end() ? nullptr : &it->second;
}

// Applies an operator command stored for the spec and not yet applied.
RolloutState ControlLoop::ApplyCommands(absl::Time now, const StoreRecords& state,
                                        const InferenceReplicaSpec& spec, RolloutState rollout,
                                        ControlOutput& out) {
  std::optional<StoredRolloutCommand> record = RolloutCommandIn(state, spec.name);
  if (!record || record->id <= rollout.last_command) return rollout;
  rollout.last_command = record->id;
  absl::StatusOr<RolloutState> next = ApplyCommand(now, spec, rollout, record->command, window_);
  if (!next.ok()) {
    AddEvent(now, spec.name,
             StrCat("rollout ", RolloutCommandName(record->command),
                    " ignored: ", next.status().message()));
    return rollout;
  }
  AddEvent(now, spec.name,
           StrCat("rollout ", RolloutCommandName(record->command), " by the operator"));
  if (record->command == RolloutCommand::kRollback) out.rollbacks.push_back(spec.name);
  return *next;
}

std::vector<NodeStatus> ControlLoop::NodeStatuses(const StoreRecords& state,
                                                  const std::set<std::string>& weights) {
  const std::map<std::string, NodeOps> ops = NodeOpsIn(state);
  std::vector<NodeStatus> statuses;
  for (auto& [id, st] : nodes_) {
    auto o = ops.find(id);
    if (o != ops.end()) {
      st.inventory.cordoned = o->second.cordoned;
      st.inventory.draining = o->second.draining;
      for (const std::string& t : o->second.taints) {
        if (std::find(st.inventory.taints.begin(), st.inventory.taints.end(), t) ==
            st.inventory.taints.end()) {
          st.inventory.taints.push_back(t);  // a node out of the view keeps its inventory
        }
      }
    }
    // What the node has pulled and verified; a node without a weights fetcher starts replicas
    // from directories of its own, so it counts as staged for everything.
    auto w = node_weights_.find(id);
    st.staged_models =
        w == node_weights_.end() || !w->second.pulls_models ? weights : w->second.staged;
    if (st.inventory.gpus.empty()) continue;
    std::vector<ReplicaRecord> replicas = std::move(st.replicas);  // lent, not copied
    statuses.push_back(st);
    statuses.back().replicas = std::move(replicas);
  }
  return statuses;
}

// Status per spec: its tracks summed.
void ControlLoop::Summarize(const ControlInput& in, const Specs& specs,
                            const ReconcileResult& result, ControlOutput& out) {
  std::map<std::string, DeploymentStatus> sums;
  for (const DeploymentStatus& t : result.deployments) {
    const std::string name(SpecOfTrack(t.name));
    DeploymentStatus& s = sums[name];
    s.name = name;
    AddTrack(t, s);
  }
  for (const auto& [name, d] : specs) {
    sums[name].name = name;
    auto scaled = scaled_.find(name);
    sums[name].desired = scaled == scaled_.end() ? d->spec.replicas : scaled->second;
  }
  for (auto it = status_.begin(); it != status_.end();) {
    if (sums.count(it->first) || in.state->count(StrCat(kSpecPrefix, it->first))) {
      ++it;
      continue;
    }
    out.gone.push_back(it->first);
    it = status_.erase(it);
  }
  for (auto& [name, s] : sums) {
    DeploymentStatus& old = status_[name];
    if (s.pending > 0 && s.pending_reason != old.pending_reason) {
      AddEvent(in.now, name, StrCat("pending ", s.pending, ": ", s.pending_reason));
    }
    old = s;
  }
}

// Events for what the reconciler is about to do, and the node actions with what they start.
void ControlLoop::Announce(absl::Time now, const ReconcileResult& result, const Specs& tracks,
                           const std::vector<cluster::LabelRule>& rules, ControlOutput& out) {
  for (const Action& a : result.actions) {
    const std::string deployment(SpecOfTrack(a.deployment));
    if (a.kind == ActionKind::kPrestage) {
      // Once per (node, model): the reconciler asks again every step until it is staged.
      if (prestage_announced_.size() > 10'000) prestage_announced_.clear();
      if (prestage_announced_.insert(StrCat(a.node, "\n", a.weights)).second) {
        AddEvent(now, deployment, StrCat("prestage ", a.weights, " on ", a.node, ": ", a.reason));
      }
    } else {
      AddEvent(now, deployment,
               StrCat(ActionKindName(a.kind), " ", a.replica_id(), " on ", a.node,
                      a.kind == ActionKind::kStart ? StrCat(" (generation ", a.generation, ")")
                                                   : std::string(),
                      ": ", a.reason));
    }
    NodeAction action{a, "", "", "", {}};
    auto track = tracks.find(a.deployment);
    if (a.kind == ActionKind::kStart && track != tracks.end()) {
      const InferenceReplicaSpec& spec = track->second->spec;
      action.model = spec.model;
      action.version = spec.version;
      action.backend = spec.backend;
      cluster::Labels labels(spec.labels.begin(), spec.labels.end());
      labels["version"] = spec.version;
      labels[std::string(kDeploymentLabel)] = spec.name;
      // The stored label rules (`replica label`), so a rebuilt or added replica carries them;
      // none touches exaserve.io/ keys (ValidateChange), so the deployment label stays.
      action.labels =
          cluster::ApplyRules(rules, a.replica_id(), spec.model, spec.version, std::move(labels));
    }
    out.actions.push_back(std::move(action));
  }
  for (const Relabel& r : out.relabels) {
    AddEvent(now, r.spec,
             StrCat("relabel ", r.replica_id, " on ", r.node, " (stored label rules)"));
  }
}

}  // namespace exa::scheduler
