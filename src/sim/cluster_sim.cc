#include "sim/cluster_sim.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "cluster/election.h"
#include "common/random.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "consensus/log_storage.h"
#include "fmt/format.h"
#include "membership/swim_core.h"
#include "scheduler/control_loop.h"
#include "scheduler/device_fit.h"
#include "scheduler/memory_planner.h"
#include "scheduler/node_view.h"
#include "scheduler/raft_spec_store.h"
#include "scheduler/reconciler.h"
#include "scheduler/rollout.h"
#include "sim/cluster_sim_state.h"

namespace exa::sim {
namespace {

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

}  // namespace

namespace cluster_internal {

absl::Status ClusterSim::Setup() {
  std::vector<scheduler::InferenceReplicaSpec> specs;
  if (!o_.spec_file.empty()) {
    EXA_ASSIGN_OR_RETURN(specs, scheduler::LoadSpecFile(o_.spec_file));
  } else {
    EXA_ASSIGN_OR_RETURN(specs, scheduler::ParseSpecs(o_.spec_yaml, "spec"));
  }
  scheduler::ModelCatalog catalog = scheduler::ModelCatalog::WithPresets();
  for (const auto& spec : specs) {
    EXA_ASSIGN_OR_RETURN(uint64_t bytes, scheduler::ReplicaBytesForSpec(spec, catalog));
    desired_.push_back(scheduler::DesiredDeployment{spec, bytes});
  }
  EXA_ASSIGN_OR_RETURN(scheduler::ModelShape shape, catalog.Find(specs.front().model));
  weight_bytes_ = static_cast<uint64_t>(shape.parameters) * scheduler::PrecisionBytes(shape.dtype);
  replicas_per_node_planned_ = scheduler::ReplicasPerEmptyNode(
      o_.gpu_memory_bytes, o_.gpus_per_node, desired_.front().replica_bytes,
      desired_.front().spec.resources.gpu);

  const int total = o_.nodes + o_.schedulers;
  nodes_.resize(total);
  for (int i = 0; i < total; ++i) {
    SimNode& n = nodes_[i];
    n.scheduler = i >= o_.nodes;
    n.gpu = !n.scheduler;
    // Schedulers spread over the first racks, one per rack (the election's spread).
    n.rack = n.scheduler ? (i - o_.nodes) % o_.racks : i % o_.racks;
    n.id = n.scheduler ? fmt::format("sched-{:02d}", i - o_.nodes) : fmt::format("gpu-{:04d}", i);
    n.address = fmt::format("10.{}.{}.{}:7946", n.rack, (i / 250) % 250, i % 250 + 1);
    network_.Listen(n.address, i);
    by_id_[n.id] = i;
    Push(start_ + absl::Milliseconds(20) * i, Kind::kStart, i);
  }
  Push(start_ + kAgentInterval, Kind::kCheck, -1);
  return o_.scenario == "diurnal" ? SetupDiurnal() : absl::OkStatus();
}

void ClusterSim::StartNode(absl::Time now, int i) {
  SimNode& n = nodes_[i];
  membership::Metadata md;
  md.rack = fmt::format("rack-{:02d}", n.rack);
  md.roles = {n.scheduler ? "scheduler" : "inference"};
  if (n.gpu) {
    md.nvlink_domain = fmt::format("nvl-{}", n.id);
    md.gpus = membership::GpuSummary{static_cast<uint16_t>(o_.gpus_per_node),
                                     static_cast<uint32_t>(o_.gpu_memory_bytes >> 20), "H100-SXM"};
  }
  n.core = std::make_unique<SwimCore>(config_, SwimCore::LocalNode{n.id, n.address, md, 0},
                                      rng_.Next(), now);
  n.started = true;
  if (n.scheduler) {
    n.log = std::make_unique<consensus::MemoryLogStorage>();
    scheduler::RaftStoreConfig store;
    store.raft.seed = rng_.Next();
    n.store = std::make_unique<scheduler::RaftSpecStore>(n.id, n.log.get(), store);
    n.store->Open(now).IgnoreError();  // an empty log: it cannot fail
    n.loop = std::make_unique<scheduler::ControlLoop>(scheduler::ControlLoopOptions{});
  }
  std::vector<Address> seeds;
  for (int k = 0; k < 2 && i > 0; ++k) seeds.push_back(nodes_[rng_.Uniform(i)].address);
  n.core->Join(now, seeds);
  AfterInteraction(now, i);
}

void ClusterSim::AfterInteraction(absl::Time now, int i) {
  SimNode& n = nodes_[i];
  for (membership::OutPacket& p : n.core->TakePackets()) {
    std::optional<int> to = network_.NodeAt(p.to);
    if (!to || !Connected(i, *to)) continue;
    std::optional<absl::Duration> delay = network_.Transit(p.channel, rng_);
    if (!delay) continue;  // never: this network loses nothing
    Push(now + *delay, Kind::kDeliver, *to, 0, InFlight{i, p.channel, std::move(p.bytes)});
  }
  n.core->TakeEvents();
  absl::Time next = std::max(now, n.core->NextTick());
  if (next != n.scheduled) {
    n.scheduled = next;
    Push(next, Kind::kTick, i, ++n.tick_gen);
  }
}

bool ClusterSim::AllSeeAllAlive() const {
  for (const SimNode& n : nodes_) {
    if (!n.started || n.core->CountInState(MemberState::kAlive) != nodes_.size()) return false;
  }
  return true;
}

int ClusterSim::ReadyReplicas() const {
  int ready = 0;
  for (const SimNode& n : nodes_) {
    if (n.killed) continue;
    for (const AgentReplica& r : n.replicas) ready += r.record.phase == ReplicaPhase::kReady;
  }
  return ready;
}

void ClusterSim::AdvanceAgents(absl::Time now) {
  for (SimNode& n : nodes_) {
    if (n.killed || !n.gpu) continue;
    for (auto it = n.staging.begin(); it != n.staging.end();) {
      if (now < it->second) {
        ++it;
        continue;
      }
      n.staged.insert(it->first);
      it = n.staging.erase(it);
    }
    for (AgentReplica& r : n.replicas) {
      if (r.record.phase == ReplicaPhase::kStarting && now >= r.ready_at) {
        r.record.phase = ReplicaPhase::kReady;
        r.record.phase_since = now;
      }
    }
  }
}

void ClusterSim::Apply(absl::Time now, int s, const Action& a) {
  int target = by_id_.at(a.node);
  if (!Connected(s, target)) return;  // the RPC fails; the next step retries
  SimNode& n = nodes_[target];
  if (a.kind == ActionKind::kPrestage) {
    if (phase_ == Phase::kFault && first_prestage_s_ < 0) {
      first_prestage_s_ = Round3(Since(now, fault_at_));
    }
    if (!n.staged.count(a.weights) && !n.staging.count(a.weights)) {
      double s_needed = weight_bytes_ / (o_.stage_gbps * 1e9) * (0.9 + 0.3 * rng_.UniformDouble());
      n.staging[a.weights] = now + absl::Seconds(s_needed);
    }
    return;
  }
  auto same = [&a](const AgentReplica& r) {
    return r.record.deployment == a.deployment && r.record.ordinal == a.ordinal;
  };
  // A replacement is counted where it starts: the stop of a restart in place, or the start of
  // its surge copy.
  if (a.replacement == scheduler::Replacement::kMemoryLeak) {
    leak_restarts_++;
    if (leak_restart_s_ < 0) leak_restart_s_ = Round3(Since(now, fault_at_));
  } else if (a.replacement == scheduler::Replacement::kMaxLifetime) {
    lifetime_restarts_[a.replica_id()]++;
    lifetime_restart_s_.push_back(Since(now, fault_at_));
  }
  if (a.kind == ActionKind::kStop) {
    Stop(now, n, a);
    return;
  }
  auto it = std::find_if(n.replicas.begin(), n.replicas.end(), same);
  if (it != n.replicas.end() && it->record.generation >= a.generation) return;  // idempotent
  if (it != n.replicas.end()) n.replicas.erase(it);
  for (const SimNode& other : nodes_) {
    if (&other == &n || other.killed) continue;
    if (std::any_of(other.replicas.begin(), other.replicas.end(), same)) duplicate_starts_++;
  }
  // Memory is never over-committed: what the node's GPUs hold plus this replica fits on each.
  for (int g : a.allocation.gpus) {
    uint64_t used = a.allocation.bytes_per_gpu;
    for (const AgentReplica& r : n.replicas) {
      for (int rg : r.record.allocation.gpus)
        used += rg == g ? r.record.allocation.bytes_per_gpu : 0;
    }
    if (used > o_.gpu_memory_bytes) overcommits_++;
  }
  if (!new_version_.empty() && a.deployment.size() > new_version_.size() &&
      a.deployment.compare(a.deployment.size() - new_version_.size(), new_version_.size(),
                           new_version_) == 0) {
    new_version_starts_++;
  }
  double load_s = weight_bytes_ / (o_.load_gbps * 1e9) * (0.9 + 0.4 * rng_.UniformDouble());
  if (!n.staged.count(a.weights)) load_s += weight_bytes_ / (o_.stage_gbps * 1e9);
  n.replicas.push_back(AgentReplica{ReplicaRecord{a.deployment, a.ordinal, a.generation,
                                                  a.allocation, ReplicaPhase::kStarting, now},
                                    now + absl::Seconds(load_s) + kProbeDelay});
  n.replicas.back().traffic_id = ++next_traffic_id_;
  starts_by_reason_[a.reason.rfind("wave ", 0) == 0 ? "wave" : a.reason]++;
  if (a.reason == "rebuild" && fault_at_ != absl::InfiniteFuture()) {
    rebuild_s_.push_back(Since(now, fault_at_));
  }
  if (a.reason.rfind("wave ", 0) == 0) {
    int wave = std::atoi(a.reason.c_str() + 5);
    Wave& w = waves_[wave];
    w.replicas++;
    if (w.started_s < 0) w.started_s = Round3(Since(now, applied_at_));
  }
}

void ClusterSim::Stop(absl::Time now, SimNode& n, const Action& a) {
  if (traffic_ != nullptr && Drain(now, n, a)) return;
  size_t before = n.replicas.size();
  std::erase_if(n.replicas, [&](const AgentReplica& r) {
    return r.record.deployment == a.deployment && r.record.ordinal == a.ordinal &&
           r.record.generation == a.generation;
  });
  if (n.replicas.size() != before && phase_ == Phase::kFault &&
      (a.reason.rfind("duplicate", 0) == 0 || a.reason.rfind("replaced by", 0) == 0)) {
    stale_stopped_++;
  }
}

void ClusterSim::StepSchedulers(absl::Time now) {
  reports_.clear();
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    const SimNode& n = nodes_[i];
    if (!n.gpu || !n.started || n.killed) continue;  // keeps its last report
    scheduler::NodeReport report{n.id, n.boot_id, /*pulls_models=*/true, n.staged, {}};
    report.replicas.reserve(n.replicas.size());
    for (const AgentReplica& r : n.replicas) {
      report.replicas.push_back(scheduler::ReportedReplica{
          .replica_id = scheduler::ReplicaId(r.record.deployment, r.record.ordinal),
          .state =
              r.draining ? "draining" : std::string(scheduler::ReplicaPhaseName(r.record.phase)),
          .version = std::string(scheduler::VersionOfTrack(r.record.deployment)),
          .generation = r.record.generation,
          .devices = r.record.allocation.gpus,
          .state_since = r.record.phase_since,
          .labels = {{std::string(scheduler::kDeploymentLabel), r.record.deployment}},
          .inter_token_p99_ms = r.p99_ms,
          .recent_finished = r.p99_ms > 0 ? 1 : 0,  // measured, no errors
          .memory_bytes = r.memory_bytes});
      if (traffic_ != nullptr) ReportLoad(now, r, report.replicas.back());
    }
    reports_[n.group].push_back(std::move(report));
  }
  for (int s = 0; s < static_cast<int>(nodes_.size()); ++s) {
    if (nodes_[s].scheduler && !nodes_[s].killed) SchedulerStep(now, s);
  }
}

// One control step of scheduler `s`, as the scheduler service takes it (scheduler_service.h):
// the scheduler set from the election over its view goes to the spec store, the node agents it
// reaches report, and the control loop steps; the acting one's writes go to the store and its
// actions to the node agents.
void ClusterSim::SchedulerStep(absl::Time now, int s) {
  SimNode& me = nodes_[s];
  const std::vector<membership::Member> members = me.core->members();
  std::vector<cluster::ElectionNode> view;
  for (const membership::Member& m : members) {
    if (m.state != MemberState::kAlive && m.state != MemberState::kSuspect) continue;
    view.push_back(
        cluster::ElectionNode{m.id, m.metadata.rack, cluster::ParseRoleList(m.metadata.roles)});
  }
  std::vector<std::string> live;
  for (const auto& [id, roles] : cluster::ElectRoles(view, cluster::ElectionConfig{})) {
    if (roles.Has(cluster::Role::kScheduler)) live.push_back(id);
  }
  me.loop->ObserveMembers(now, members);
  std::vector<std::string> dead;
  for (const auto& [id, st] : me.loop->nodes()) {
    if (st.liveness == scheduler::NodeLiveness::kDead &&
        st.inventory.roles.Has(cluster::Role::kScheduler)) {
      dead.push_back(id);
    }
  }
  me.store->SetMembers(now, live, dead);
  FlushStore(now, s);
  scheduler::ControlInput in;
  in.now = now;
  in.members = &members;
  in.reports = reports_[me.group];
  in.state = &me.store->Records();
  in.leader = me.store->Leader();
  in.term = me.store->Term();
  in.acting = me.store->ReadyToLead();
  const double cpu0 = CpuSeconds();
  scheduler::ControlOutput out = me.loop->Step(in);
  if (in.acting) reconcile_cpu_s_ += CpuSeconds() - cpu0;
  for (const auto& [key, value] : out.writes) me.store->Put(now, key, value);
  FlushStore(now, s);
  if (!in.acting) return;
  Observe(now, s, out);
  for (const scheduler::NodeAction& a : out.actions) Apply(now, s, a.action);
}

void ClusterSim::Observe(absl::Time now, int s, const scheduler::ControlOutput& out) {
  SimNode& me = nodes_[s];
  if (!out.actions.empty() && !killed_leader_.empty() && me.id != killed_leader_ &&
      takeover_s_ < 0) {
    takeover_s_ = Round3(Since(now, fault_at_));
    new_reconciler_ = me.id;
  }
  last_reconciler_ = me.id;
  for (const scheduler::ControlEvent& e : out.events) {
    if (e.rollout)
      rollout_events_.push_back(StrCat(Round3(Since(now, applied_at_)), "s ", e.message));
  }
  for (const auto& [key, value] : out.writes) {
    if (key.rfind(scheduler::kRolloutPrefix, 0) != 0) continue;
    if (auto parsed = scheduler::RolloutStateFromJson(value); parsed.ok()) rollout_ = *parsed;
    if (Canary() && rollout_end_s_ < 0 && fault_at_ != absl::InfiniteFuture() &&
        (rollout_.phase == scheduler::RolloutPhase::kRolledBack ||
         rollout_.phase == scheduler::RolloutPhase::kSucceeded)) {
      rollout_end_s_ = Round3(Since(now, fault_at_));
      end_ = std::min(end_, now + absl::Seconds(30));  // let the last stops land
    }
  }
  flagged_.clear();
  for (const std::string& key : me.loop->leaks().FlaggedIds()) {
    const std::string id = key.substr(key.find('/') + 1);  // "node/replica"
    flagged_.push_back(id);
    if (phase_ == Phase::kFault && !flagged_at_s_.count(id)) {
      flagged_at_s_[id] = Round3(Since(now, fault_at_));
    }
  }
  if (!me.loop->status().empty())
    pending_reason_ = me.loop->status().begin()->second.pending_reason;
  if (traffic_ != nullptr) NoteDecisions(now, out);
}

void ClusterSim::FlushStore(absl::Time now, int i) {
  SimNode& n = nodes_[i];
  for (const scheduler::WriteOutcome& o : n.store->TakeOutcomes()) {
    auto w = spec_writes_.find(o.id);
    if (w == spec_writes_.end()) continue;
    scheduler::InferenceReplicaSpec spec = std::move(w->second);
    spec_writes_.erase(w);
    if (!o.ok) {  // refused (no leader yet): the operator runs `apply` again
      spec_write_retries_++;
      PutSpec(now, i, spec);
    } else if (spec_writes_.empty() && spec_acknowledged_s_ < 0) {
      spec_acknowledged_s_ = Round3(Since(now, applied_at_));
    }
  }
  for (scheduler::StoreFrame& f : n.store->TakeFrames()) {
    int to = by_id_.at(f.to);
    if (!Connected(i, to)) continue;
    // Store frames ride an open stream: the latency alone, no connection setup.
    const absl::Time at = now + network_.Latency(rng_);
    queue_.Push(at, QEvent{Kind::kStore, to, 0, InFlight{i, Channel::kReliable, {}},
                           std::make_shared<const std::string>(std::move(f.bytes))});
  }
}

void ClusterSim::PutSpec(absl::Time now, int i, const scheduler::InferenceReplicaSpec& spec) {
  auto id = nodes_[i].store->Put(now, StrCat(scheduler::kSpecPrefix, spec.name),
                                 scheduler::SpecToYaml(spec));
  if (id) spec_writes_.emplace(*id, spec);
}

// `exaserve-cli apply` against one scheduler that does not lead the Raft log, so the write is
// forwarded to the leader.
void ClusterSim::WriteSpecs(absl::Time now) {
  int writer = -1;
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    if (nodes_[i].scheduler && (writer < 0 || !nodes_[i].store->IsLeader())) writer = i;
  }
  spec_writer_ = nodes_[writer].id;
  for (const scheduler::DesiredDeployment& d : desired_) PutSpec(now, writer, d.spec);
  FlushStore(now, writer);
}

// Ready replicas report a p99 latency every 30 s: a base with ±10 % noise, 30 % higher on the
// new version in canary-bad.
void ClusterSim::SampleLatency() {
  for (SimNode& n : nodes_) {
    if (n.killed) continue;
    for (AgentReplica& r : n.replicas) {
      if (r.record.phase != ReplicaPhase::kReady) continue;
      const std::string& track = r.record.deployment;
      const std::string version(scheduler::VersionOfTrack(track));
      double p99 = 0.050 * (0.9 + 0.2 * rng_.UniformDouble());
      if (o_.scenario == "canary-bad" && version == new_version_) p99 *= 1.3;
      // What the replica holds: its share on each of its GPUs.
      const double bytes = static_cast<double>(r.record.allocation.bytes_per_gpu) *
                           static_cast<double>(r.record.allocation.gpus.size());
      r.p99_ms = p99 * 1000;
      r.memory_bytes = static_cast<uint64_t>(bytes);
    }
  }
}

// Every ready replica's memory: its reservation ±0.5 %; the leaking one grows 3 % of its baseline
// an hour.
void ClusterSim::SampleMemory(absl::Time now) {
  const double hours = absl::ToDoubleHours(now - fault_at_);
  for (SimNode& n : nodes_) {
    if (n.killed) continue;
    for (AgentReplica& r : n.replicas) {
      if (r.record.phase != ReplicaPhase::kReady) continue;
      const std::string id = scheduler::ReplicaId(r.record.deployment, r.record.ordinal);
      double bytes = static_cast<double>(r.record.allocation.bytes_per_gpu) *
                     static_cast<double>(r.record.allocation.gpus.size()) * 0.8;
      bytes *= 0.995 + 0.01 * rng_.UniformDouble();
      if (id == leaking_ && r.record.generation == leaking_generation_) bytes *= 1 + 0.03 * hours;
      r.memory_bytes = static_cast<uint64_t>(bytes);
    }
  }
}

uint64_t ClusterSim::GenerationOf(const std::string& id) const {
  uint64_t generation = 0;
  for (const SimNode& n : nodes_) {
    for (const AgentReplica& r : n.replicas) {
      if (scheduler::ReplicaId(r.record.deployment, r.record.ordinal) == id) {
        generation = std::max(generation, r.record.generation);
      }
    }
  }
  return generation;
}

json ClusterSim::RolloutFigures() {
  json r;
  r["new_version"] = new_version_;
  r["phase"] = scheduler::RolloutPhaseName(rollout_.phase);
  r["stable_version"] = rollout_.stable_version;
  r["stages"] = scheduler::RolloutStageCounts(desired_.front().spec);
  r["stages_passed"] = std::count_if(rollout_.decisions.begin(), rollout_.decisions.end(),
                                     [](const auto& d) { return d.decision == "promoted"; });
  json decisions = json::array();
  for (const scheduler::StageDecision& d : rollout_.decisions) {
    json metrics = json::array();
    for (const scheduler::MetricComparison& m : d.metrics) {
      metrics.push_back({{"metric", m.metric},
                         {"old", m.old_value},
                         {"new", m.new_value},
                         {"old_samples", m.old_samples},
                         {"new_samples", m.new_samples},
                         {"regressed", m.regressed}});
    }
    decisions.push_back({{"stage", d.stage + 1},
                         {"replicas", d.replicas},
                         {"decision", d.decision},
                         {"at_s", Round3(Since(d.at, fault_at_))},
                         {"metrics", metrics}});
  }
  r["decisions"] = decisions;
  r["failure"] = rollout_.failure;
  r["new_version_replicas_created"] = new_version_starts_;
  r["end_s"] = rollout_end_s_ >= 0 ? json(rollout_end_s_) : json(nullptr);
  r["min_availability"] = Round3(min_availability_);
  r["memory_overcommits"] = overcommits_;
  r["events"] = rollout_events_;
  return r;
}

json ClusterSim::LifetimeFigures() {
  const scheduler::DesiredDeployment& d = desired_.front();
  json l;
  int once = 0, more = 0;
  for (const auto& [id, c] : lifetime_restarts_) (c == 1 ? once : more)++;
  std::sort(lifetime_restart_s_.begin(), lifetime_restart_s_.end());
  const double hours = absl::ToDoubleHours(end_ - fault_at_);
  l["max_lifetime_h"] = absl::ToDoubleHours(d.spec.max_lifetime);
  l["simulated_h"] = Round3(hours);
  l["replicas_restarted_once"] = once;
  l["replicas_restarted_more_than_once"] = more;
  l["restarts"] = lifetime_restart_s_.size();
  l["restarts_per_hour"] = Round3(lifetime_restart_s_.size() / std::max(hours, 1e-9));
  l["first_restart_h"] = lifetime_restart_s_.empty()
                             ? json(nullptr)
                             : json(Round3(lifetime_restart_s_.front() / 3600));
  l["last_restart_h"] =
      lifetime_restart_s_.empty() ? json(nullptr) : json(Round3(lifetime_restart_s_.back() / 3600));
  l["max_unavailable"] = scheduler::MaxUnavailable(d.spec);
  l["max_out_of_service"] = max_out_of_service_;
  l["min_availability"] = Round3(min_availability_);
  l["memory_overcommits"] = overcommits_;
  return l;
}

json ClusterSim::PlacementFigures() {
  // One placement of every replica on the cluster as registered, timed on its own: the figure
  // the 1-CPU-second bound is about. The bring-up itself places wave by wave.
  std::vector<scheduler::NodeInventory> inventory;
  for (const SimNode& n : nodes_) {
    scheduler::NodeInventory inv;
    inv.id = n.id;
    inv.rack = fmt::format("rack-{:02d}", n.rack);
    inv.roles = {n.scheduler ? cluster::Role::kScheduler : cluster::Role::kInference};
    if (n.gpu) {
      inv.gpus.assign(o_.gpus_per_node,
                      scheduler::GpuDevice{o_.gpu_memory_bytes, fmt::format("nvl-{}", n.id)});
    }
    inventory.push_back(std::move(inv));
  }
  const scheduler::DesiredDeployment& d = desired_.front();
  scheduler::PlacementRequest req;
  req.deployment = d.spec.name;
  req.count = d.spec.replicas;
  req.replica_bytes = d.replica_bytes;
  req.min_gpus = d.spec.resources.gpu;
  req.topology = d.spec.topology;
  scheduler::MemoryLedger ledger;
  double cpu0 = CpuSeconds();
  scheduler::PlacementResult placed = scheduler::Place(inventory, ledger, req, {});
  double cpu_s = CpuSeconds() - cpu0;
  json out;
  out["placement_cpu_s"] = std::round(cpu_s * 1e5) / 1e5;
  out["replicas_placed"] = placed.placed.size();
  out["replicas_unplaced"] = placed.unplaced;
  if (!placed.reason.empty()) out["unplaced_reason"] = placed.reason;
  return out;
}

void ClusterSim::RecordBringup(absl::Time now) {
  std::vector<int> per_node;
  std::vector<scheduler::Allocation> allocations;
  std::vector<scheduler::NodeInventory> inventory;
  uint64_t reserved = 0, total = 0;
  for (const SimNode& n : nodes_) {
    if (!n.gpu) continue;
    per_node.push_back(static_cast<int>(n.replicas.size()));
    total += o_.gpu_memory_bytes * o_.gpus_per_node;
    scheduler::NodeInventory inv;
    inv.id = n.id;
    inv.rack = fmt::format("rack-{:02d}", n.rack);
    inv.gpus.assign(o_.gpus_per_node,
                    scheduler::GpuDevice{o_.gpu_memory_bytes, fmt::format("nvl-{}", n.id)});
    inventory.push_back(std::move(inv));
    for (const AgentReplica& r : n.replicas) {
      allocations.push_back(r.record.allocation);
      reserved += r.record.allocation.bytes_per_gpu * r.record.allocation.gpus.size();
    }
  }
  std::sort(per_node.begin(), per_node.end());
  const scheduler::DesiredDeployment& d = desired_.front();
  json b = placement_;
  b["replicas_running"] = allocations.size();
  b["replicas_per_node"] = {{"min", per_node.front()},
                            {"median", per_node[per_node.size() / 2]},
                            {"max", per_node.back()},
                            {"planned", replicas_per_node_planned_}};
  b["memory_utilisation"] = Round3(static_cast<double>(reserved) / total);
  b["topology_satisfied"] = Round3(scheduler::TopologySatisfied(
      inventory, allocations, d.spec.topology, d.replica_bytes, d.spec.resources.gpu));
  json waves = json::array();
  for (const auto& [i, w] : waves_) {
    waves.push_back({{"wave", i},
                     {"replicas", w.replicas},
                     {"started_s", w.started_s},
                     {"ready_s", w.ready_s}});
  }
  b["waves"] = waves;
  b["all_ready_s"] = all_ready_s_ >= 0 ? json(all_ready_s_) : json(nullptr);
  b["bringup_end_s"] = Round3(Since(now, applied_at_));
  if (all_ready_s_ < 0) b["pending_reason"] = pending_reason_;
  bringup_ = b;
}

void ClusterSim::StartFault(absl::Time now) {
  phase_ = Phase::kFault;
  fault_at_ = now;
  end_ = now + absl::Seconds(o_.duration_s);
  std::vector<int> gpu_nodes;
  for (int i = 0; i < o_.nodes; ++i) gpu_nodes.push_back(i);
  rng_.Shuffle(gpu_nodes);
  auto take = [&](int k) {
    faulted_.assign(gpu_nodes.begin(), gpu_nodes.begin() + std::min<size_t>(k, gpu_nodes.size()));
    for (int i : faulted_) replicas_on_faulted_ += static_cast<int>(nodes_[i].replicas.size());
  };
  if (o_.scenario == "kill-8-nodes") {
    take(o_.fault_nodes);
    for (int i : faulted_) nodes_[i].killed = true;
  } else if (o_.scenario == "blip-20s") {
    take(o_.fault_nodes);
    for (int i : faulted_) nodes_[i].group = 1;
    healed_at_ = now + absl::Seconds(o_.blip_s);
    Push(healed_at_, Kind::kHeal, -1);
  } else if (o_.scenario == "rack-partition") {
    int rack = o_.racks - 1;
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
      if (nodes_[i].rack != rack) continue;
      nodes_[i].group = 1;
      faulted_.push_back(i);
      replicas_on_faulted_ += static_cast<int>(nodes_[i].replicas.size());
    }
    healed_at_ = now + absl::Seconds(o_.partition_s);
    Push(healed_at_, Kind::kHeal, -1);
  } else if (o_.scenario == "lifetime") {
    end_ = now + absl::Seconds(o_.duration_s);
  } else if (o_.scenario == "leak") {
    end_ = now + absl::Seconds(o_.duration_s);
    std::vector<std::string> ids;
    for (const SimNode& n : nodes_) {
      for (const AgentReplica& r : n.replicas) {
        ids.push_back(scheduler::ReplicaId(r.record.deployment, r.record.ordinal));
      }
    }
    std::sort(ids.begin(), ids.end());
    if (!ids.empty()) leaking_ = ids[rng_.Uniform(ids.size())];
    leaking_generation_ = GenerationOf(leaking_);
    next_memory_sample_ = now;
  } else if (Canary()) {
    // `exaserve-cli apply` of the same spec with a new version, to the highest-id scheduler.
    scheduler::InferenceReplicaSpec spec = desired_.front().spec;
    new_version_ = StrCat(spec.version, "-new");
    spec.version = new_version_;
    end_ = now + absl::Seconds(o_.duration_s);
    for (int i = static_cast<int>(nodes_.size()) - 1; i >= 0; --i) {
      if (!nodes_[i].scheduler || nodes_[i].killed) continue;
      PutSpec(now, i, spec);
      FlushStore(now, i);
      break;
    }
  } else if (o_.scenario == "kill-scheduler-leader") {
    killed_leader_ = last_reconciler_;  // the Raft leader, which is the reconciler
    int i = by_id_.at(killed_leader_);
    nodes_[i].killed = true;
    faulted_.push_back(i);
  }
}

void ClusterSim::Heal(absl::Time now) {
  for (SimNode& n : nodes_) n.group = 0;
  for (SimNode& n : nodes_) {
    if (n.started && !n.killed) {
      n.core->Tick(now);
      AfterInteraction(now, by_id_.at(n.id));
    }
  }
}

void ClusterSim::Check(absl::Time now) {
  checks_++;
  AdvanceAgents(now);
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    if (!nodes_[i].scheduler || nodes_[i].killed || !nodes_[i].started) continue;
    nodes_[i].store->Tick(now);
    FlushStore(now, i);
  }
  if (phase_ == Phase::kWarmup) {
    bool all_started =
        std::all_of(nodes_.begin(), nodes_.end(), [](const SimNode& n) { return n.started; });
    if ((all_started && AllSeeAllAlive()) || now - start_ > absl::Seconds(300)) {
      warmup_s_ = Round3(Since(now, start_));
      phase_ = Phase::kBringup;
      applied_at_ = now;
      placement_ = PlacementFigures();
      WriteSpecs(now);
    }
  }
  if (checks_ % kStepEveryChecks == 0 && traffic_ != nullptr && phase_ >= Phase::kSteady) {
    StepTraffic(now);
  }
  if (checks_ % kStepEveryChecks == 0 && phase_ != Phase::kWarmup) StepSchedulers(now);
  int ready = ReadyReplicas();
  int desired = desired_.empty() ? 0 : desired_.front().spec.replicas;
  if ((o_.scenario == "lifetime" || o_.scenario == "leak") && phase_ == Phase::kFault) {
    max_out_of_service_ = std::max(max_out_of_service_, desired - ready);
    if (desired > 0) min_availability_ = std::min(min_availability_, double(ready) / desired);
    if (now >= next_memory_sample_) {
      SampleMemory(now);
      next_memory_sample_ = now + absl::Hours(1);
    }
  }
  if (Canary() && phase_ == Phase::kFault) {
    if (checks_ % 120 == 0) SampleLatency();  // every 30 s
    if (desired > 0) min_availability_ = std::min(min_availability_, double(ready) / desired);
  } else if (Canary() && phase_ == Phase::kSteady && checks_ % 120 == 0) {
    SampleLatency();  // the old version's baseline
  }
  int cumulative = 0;
  for (auto& [i, w] : waves_) {
    cumulative += w.replicas;
    if (w.ready_s < 0 && ready >= cumulative) w.ready_s = Round3(Since(now, applied_at_));
  }
  if (phase_ == Phase::kBringup) {
    bool done = ready >= desired;
    if (done) all_ready_s_ = Round3(Since(now, applied_at_));
    bool stalled = now - applied_at_ > absl::Seconds(o_.max_bringup_s);
    if (o_.scenario == "kill-scheduler-leader" && waves_.count(2) && !last_reconciler_.empty()) {
      StartFault(now);  // as the second wave starts: the new reconciler must finish bring-up
    } else if (done || stalled) {
      RecordBringup(now);
      phase_ = Phase::kSteady;
      if (o_.scenario.empty()) {
        end_ = now;
      } else {
        Push(now + (traffic_ ? kDiurnalWarmup : absl::Seconds(10)), Kind::kFault, -1);
      }
    }
  } else if (phase_ == Phase::kFault) {
    if (all_ready_s_ < 0 && ready >= desired) {
      all_ready_s_ = Round3(Since(now, applied_at_));
      RecordBringup(now);
    }
    if (all_ready_again_s_ < 0 && ready >= desired && !rebuild_s_.empty()) {
      all_ready_again_s_ = Round3(Since(now, fault_at_));
    }
  }
  if (now < end_ && phase_ != Phase::kDone) Push(now + kAgentInterval, Kind::kCheck, -1);
}

absl::StatusOr<json> ClusterSim::Run() {
  auto wall0 = std::chrono::steady_clock::now();
  EXA_RETURN_IF_ERROR(Setup());
  queue_.RunUntil(end_, [&](absl::Time now, const QEvent& ev) {
    switch (ev.kind) {
      case Kind::kStart:
        StartNode(now, ev.node);
        break;
      case Kind::kTick: {
        SimNode& n = nodes_[ev.node];
        if (n.killed || ev.gen != n.tick_gen) break;
        n.scheduled = absl::InfiniteFuture();
        n.core->Tick(now);
        AfterInteraction(now, ev.node);
        break;
      }
      case Kind::kDeliver: {
        SimNode& n = nodes_[ev.node];
        if (!n.started || !Connected(ev.packet.from, ev.node)) break;
        n.core->HandlePacket(now, nodes_[ev.packet.from].address, ev.packet.bytes,
                             ev.packet.channel);
        AfterInteraction(now, ev.node);
        break;
      }
      case Kind::kCheck:
        Check(now);
        break;
      case Kind::kFault:
        StartFault(now);
        break;
      case Kind::kHeal:
        Heal(now);
        break;
      case Kind::kStore: {
        SimNode& n = nodes_[ev.node];
        if (!Connected(ev.packet.from, ev.node)) break;
        if (!n.store->Handle(now, nodes_[ev.packet.from].id, *ev.frame).ok()) break;
        FlushStore(now, ev.node);
        break;
      }
    }
  });
  json out;
  const scheduler::DesiredDeployment& d = desired_.front();
  out["scenario"] = {{"nodes", o_.nodes},
                     {"racks", o_.racks},
                     {"gpus_per_node", o_.gpus_per_node},
                     {"gpu_memory", BytesToString(o_.gpu_memory_bytes)},
                     {"schedulers", o_.schedulers},
                     {"name", o_.scenario.empty() ? "none" : o_.scenario},
                     {"seed", o_.seed},
                     {"spec_store",
                      "scheduler/raft_spec_store.h (libraft) on every scheduler over the simulated "
                      "network, its log in memory"}};
  out["spec"] = {{"name", d.spec.name},
                 {"model", d.spec.model},
                 {"replicas", d.spec.replicas},
                 {"replica_gb", Round3(d.replica_bytes / 1e9)},
                 {"warmup_replicas", d.spec.scheduling.warmup_replicas},
                 {"batch_size", d.spec.scheduling.batch_size},
                 {"dead_grace_s", absl::ToDoubleSeconds(d.spec.dead_grace)}};
  out["warmup_s"] = warmup_s_;
  int holding = 0;
  for (const SimNode& n : nodes_) {
    if (!n.scheduler || n.killed) continue;
    bool all = true;
    for (const auto& d : desired_) all = all && n.store->Get(StrCat("spec/", d.spec.name));
    holding += all;
  }
  out["spec_store"] = {{"writer", spec_writer_},
                       {"write_acknowledged_s",
                        spec_acknowledged_s_ >= 0 ? json(spec_acknowledged_s_) : json(nullptr)},
                       {"live_schedulers_holding_specs", holding},
                       {"write_retries", spec_write_retries_}};
  if (bringup_.is_null()) RecordBringup(end_ == absl::InfiniteFuture() ? start_ : end_);
  for (auto& [k, v] : bringup_.items()) out[k] = v;
  out["reconcile_cpu_s"] = Round3(reconcile_cpu_s_);
  out["duplicate_starts"] = duplicate_starts_;
  out["starts_by_reason"] = starts_by_reason_;
  if (!o_.scenario.empty()) {
    json f;
    f["at_s"] = fault_at_ == absl::InfiniteFuture() ? json(nullptr)
                                                    : json(Round3(Since(fault_at_, applied_at_)));
    f["nodes"] = faulted_.size();
    f["replicas_on_nodes"] = replicas_on_faulted_;
    std::sort(rebuild_s_.begin(), rebuild_s_.end());
    double grace = absl::ToDoubleSeconds(d.spec.dead_grace);
    int before = static_cast<int>(std::count_if(rebuild_s_.begin(), rebuild_s_.end(),
                                                [grace](double t) { return t < grace; }));
    f["rebuilds"] = {
        {"count", rebuild_s_.size()},
        {"before_grace", before},
        {"first_s", rebuild_s_.empty() ? json(nullptr) : json(Round3(rebuild_s_.front()))},
        {"last_s", rebuild_s_.empty() ? json(nullptr) : json(Round3(rebuild_s_.back()))}};
    f["first_prestage_s"] = first_prestage_s_ >= 0 ? json(first_prestage_s_) : json(nullptr);
    f["all_ready_again_s"] = all_ready_again_s_ >= 0 ? json(all_ready_again_s_) : json(nullptr);
    f["ready_at_end"] = ReadyReplicas();
    if (ReadyReplicas() < d.spec.replicas) f["pending_reason"] = pending_reason_;
    if (o_.scenario == "kill-scheduler-leader") {
      f["killed_leader"] = killed_leader_;
      f["new_reconciler"] = new_reconciler_;
      f["takeover_s"] = takeover_s_ >= 0 ? json(takeover_s_) : json(nullptr);
    }
    if (o_.scenario == "rack-partition" || o_.scenario == "blip-20s") {
      f["stale_replicas_stopped_after_heal"] = stale_stopped_;
    }
    if (Canary()) {
      out["rollout"] = RolloutFigures();
    } else if (o_.scenario == "lifetime") {
      out["lifetime"] = LifetimeFigures();
    } else if (o_.scenario == "leak") {
      json k;
      k["leaking_replica"] = leaking_;
      k["flagged"] = flagged_;
      k["flagged_at_h"] = json::object();
      for (const auto& [id, s] : flagged_at_s_) k["flagged_at_h"][id] = Round3(s / 3600);
      // Every replica ever flagged (a replaced one's flag goes with it).
      std::vector<std::string> ever;
      for (const auto& [id, at] : flagged_at_s_) ever.push_back(id);
      k["flagged_ever"] = ever;
      k["only_the_leaking_replica_flagged"] = ever == std::vector<std::string>{leaking_};
      // scheduler.leak_action: recycle — the flagged generation replaced (surge copy or
      // stop-then-start), and the replacement, which does not leak, never flagged.
      k["leak_restarts"] = leak_restarts_;
      k["replaced_at_h"] =
          leak_restart_s_ < 0 ? json(nullptr) : json(Round3(leak_restart_s_ / 3600));
      k["leaking_generation"] = leaking_generation_;
      k["generation_now"] = GenerationOf(leaking_);
      k["simulated_h"] = Round3(absl::ToDoubleHours(end_ - fault_at_));
      out["leak"] = k;
    } else if (traffic_ != nullptr) {
      out["diurnal"] = DiurnalFigures();
    } else {
      out["fault"] = f;
    }
  }
  int duplicates_at_end = 0;
  std::map<std::string, int> copies;
  for (const SimNode& n : nodes_) {
    if (n.killed) continue;
    for (const AgentReplica& r : n.replicas) {
      if (++copies[scheduler::ReplicaId(r.record.deployment, r.record.ordinal)] == 2) {
        duplicates_at_end++;
      }
    }
  }
  out["duplicates_at_end"] = duplicates_at_end;
  out["wall_s"] =
      Round3(std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count());
  return out;
}

}  // namespace cluster_internal

nlohmann::json RunClusterSim(const ClusterSimOptions& options) {
  absl::StatusOr<nlohmann::json> r = cluster_internal::ClusterSim(options).Run();
  if (!r.ok()) return nlohmann::json{{"error", std::string(ToStd(r.status().message()))}};
  return *r;
}

}  // namespace exa::sim
