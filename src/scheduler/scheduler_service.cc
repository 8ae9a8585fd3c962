#include "scheduler/scheduler_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "common/logging.h"
#include "common/strings.h"
#include "scheduler/legacy_store.h"

namespace exa::scheduler {

absl::StatusOr<std::unique_ptr<SchedulerService>> SchedulerService::Open(
    SchedulerServiceOptions options, SchedulerEnv env) {
  const std::string path = StrCat(options.data_dir, "/raft");
  auto storage = consensus::RocksLogStorage::Open(path);
  if (!storage.ok()) return storage.status();
  std::vector<StoreRecord> legacy;
  if ((*storage)->Empty()) {
    auto old = ReadLegacyStore(StrCat(options.data_dir, "/scheduler-store"));
    if (!old.ok()) return old.status();
    legacy = std::move(*old);
  }
  auto service = std::unique_ptr<SchedulerService>(new SchedulerService(
      std::move(options), std::move(env), std::move(*storage), std::move(legacy)));
  if (absl::Status s = service->store_->Open(absl::Now()); !s.ok()) return s;
  EXA_LOG_INFO("scheduler", "spec store opened",
               {{"path", path},
                {"raft_started", service->store_->started()},
                {"records_to_import", static_cast<int64_t>(service->legacy_.size())}});
  return service;
}

SchedulerService::SchedulerService(SchedulerServiceOptions options, SchedulerEnv env,
                                   std::unique_ptr<consensus::RocksLogStorage> storage,
                                   std::vector<StoreRecord> legacy)
    : options_(std::move(options)),
      env_(std::move(env)),
      storage_(std::move(storage)),
      store_(std::make_unique<RaftSpecStore>(options_.node_id, storage_.get(), options_.store)),
      legacy_(std::move(legacy)),
      loop_(ControlLoopOptions{options_.placement, options_.max_events, options_.leaks,
                               options_.recycle_leaking}),
      client_(options_.node_id, options_.rpc_timeout, options_.node_token) {
  if (metrics::Registry* r = env_.registry) {
    desired_gauge_ =
        &r->AddGauge("exaserve_deployment_replicas_desired",
                     "Replicas a deployment's spec asks for (0 once deleted).", {"deployment"});
    ready_gauge_ = &r->AddGauge("exaserve_deployment_replicas_ready",
                                "Replicas of a deployment ready, as the scheduler last saw them.",
                                {"deployment"});
    pending_gauge_ =
        &r->AddGauge("exaserve_deployment_replicas_pending",
                     "Replicas of a deployment that could not be placed.", {"deployment"});
    rollbacks_ = &r->AddCounter("exaserve_rollout_rollbacks_total",
                                "Rollouts rolled back (a P1 alert when automatic), by deployment.",
                                {"deployment"});
    replacements_ = &r->AddCounter(
        "exaserve_scheduler_replica_replacements_total",
        "Replicas this scheduler replaced while serving (a surge copy started, or stopped to "
        "restart in place), by deployment and cause: max_lifetime or memory_leak.",
        {"deployment", "cause"});
    autoscale_desired_ = &r->AddGauge("exaserve_autoscaler_desired_replicas",
                                      "Replicas the autoscaler wants for an autoscaled deployment "
                                      "(docs/architecture.md#autoscaling).",
                                      {"deployment"});
    autoscale_ready_after_ = &r->AddGauge(
        "exaserve_autoscaler_scale_up_ready_seconds",
        "The last scale-up of an autoscaled deployment: seconds from its count coming in force to "
        "that many replicas ready (docs/architecture.md#autoscaling).",
        {"deployment"});
    autoscale_decisions_ = &r->AddCounter(
        "exaserve_autoscaler_decisions_total",
        "Autoscaler decisions this scheduler stored, by deployment and direction (up, down).",
        {"deployment", "direction"});
    reconciler_gauge_ = &r->SimpleGauge("exaserve_scheduler_reconciling",
                                        "1 on the scheduler that reconciles, else 0.");
    leaking_gauge_ = &r->SimpleGauge(
        "exaserve_scheduler_replicas_leaking",
        "Ready replicas whose memory rose in scheduler.leak_rising_samples samples in a row and "
        "by scheduler.leak_min_growth over its baseline (docs/architecture.md#leak-detection).");
    raft_term_gauge_ = &r->SimpleGauge("exaserve_raft_term",
                                       "The spec store's Raft term as this scheduler knows it.");
    raft_voters_gauge_ = &r->SimpleGauge(
        "exaserve_raft_voters",
        "Voters in the spec store's Raft configuration as this scheduler knows it (at most 5).");
    raft_applied_gauge_ = &r->SimpleGauge("exaserve_raft_applied_index",
                                          "The last Raft log index this scheduler has applied.");
  }
}

SchedulerService::~SchedulerService() { Stop(); }

void SchedulerService::Start() {
  absl::MutexLock serial(&start_mu_);
  if (thread_.joinable()) return;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = false;
  }
  running_ = true;
  store_thread_ = std::thread([this] { RunStore(); });
  thread_ = std::thread([this] { RunControl(); });
}

void SchedulerService::Stop() {
  absl::MutexLock serial(&start_mu_);
  running_ = false;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (store_thread_.joinable()) store_thread_.join();
  // Calls still waiting for acknowledgements end now rather than hang.
  std::vector<std::shared_ptr<WriteWaiter>> waiting;
  std::vector<grpc::ServerUnaryReactor*> stopped_reads;
  {
    absl::MutexLock lock(&mu_);
    std::set<WriteWaiter*> seen;
    for (auto& [id, w] : waiters_) {
      if (seen.insert(w.get()).second) waiting.push_back(w);
    }
    waiters_.clear();
    for (auto& [id, r] : readers_) stopped_reads.push_back(r.reactor);
    readers_.clear();
    // A stopped scheduler exports no deployment figures: the replica alert takes the max over
    // schedulers, and a stale "all ready" here would hide a shortfall the others see.
    if (desired_gauge_) {
      for (const auto& [name, st] : loop_.status()) {
        for (auto* g : {desired_gauge_, ready_gauge_, pending_gauge_}) g->WithLabels({name}).Set(0);
      }
    }
    if (reconciler_gauge_) reconciler_gauge_->Set(0);
    if (leaking_gauge_) leaking_gauge_->Set(0);
    loop_.Reset();
  }
  for (auto& w : waiting) {
    w->reactor->Finish(grpc::Status(grpc::UNAVAILABLE, "the scheduler is stopping"));
  }
  for (auto* r : stopped_reads)
    r->Finish(grpc::Status(grpc::UNAVAILABLE, "the scheduler is stopping"));
  // Outstanding RPCs hold `this` in their callbacks.
  client_.WaitIdle(absl::Seconds(5));
}

grpc::Status SchedulerService::CheckRunning() const {
  if (running_.load()) return grpc::Status::OK;
  std::string schedulers;
  for (const membership::Member& m : env_.members()) {
    if (!Live(m) || m.id == options_.node_id || !env_.is_scheduler(m)) continue;
    std::string address = MemberGrpcAddress(m);
    StrAppend(&schedulers, schedulers.empty() ? "" : ", ", m.id,
              address.empty() ? "" : StrCat(" (", address, ")"));
  }
  return grpc::Status(
      grpc::UNAVAILABLE,
      StrCat("node ", options_.node_id,
             " is not a scheduler now (the election moves the role with the membership view); ",
             schedulers.empty() ? "no live scheduler in its view"
                                : StrCat("ask one of: ", schedulers)));
}

grpc::Status SchedulerService::Authorize(grpc::CallbackServerContext* context,
                                         std::string_view method) const {
  return env_.authorize ? env_.authorize(*context, method) : grpc::Status::OK;
}

absl::StatusOr<uint64_t> SchedulerService::ReplicaBytes(const InferenceReplicaSpec& spec) {
  const std::string model_version = StrCat(spec.model, "@", spec.version);
  {
    absl::MutexLock lock(&mu_);
    // A preset needs no store; a model from the store is looked up once per version, so a
    // version the store does not have is refused like an unknown model (the shape learned from
    // v1 once let any v9 through).
    const bool from_store = store_models_.count(spec.model) > 0;
    absl::Status known = loop_.catalog().Find(spec.model).status();
    if (known.ok() && (!from_store || store_versions_.count(model_version) > 0)) {
      return ReplicaBytesForSpec(spec, loop_.catalog());
    }
    if (!env_.model_shape) return known;
  }
  absl::StatusOr<ModelShape> shape = env_.model_shape(spec.model, spec.version);
  if (!shape.ok()) {
    return absl::NotFoundError(StrCat("spec.model: ", spec.model, "@", spec.version,
                                      " is neither a preset nor in the weights store (",
                                      shape.status().message(), ")"));
  }
  absl::MutexLock lock(&mu_);
  loop_.catalog().Add(spec.model, *shape);
  store_models_.insert(spec.model);
  store_versions_.insert(model_version);
  return ReplicaBytesForSpec(spec, loop_.catalog());
}

// The spec store's clock: Raft's timers (100 ms heartbeats) want ticks more often than the
// control loop steps, and must not wait behind a step's node polls.
void SchedulerService::RunStore() {
  const absl::Duration tick = std::min(options_.tick, absl::Milliseconds(50));
  while (true) {
    std::vector<membership::Member> members = env_.members();
    std::vector<std::string> live_schedulers;
    for (const membership::Member& m : members) {
      if (Live(m) && env_.is_scheduler(m)) live_schedulers.push_back(m.id);
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    const absl::Time now = absl::Now();
    loop_.ObserveMembers(now, members);
    // Dead schedulers leave the Raft configuration (the leader removes them, one at a time).
    std::vector<std::string> dead_schedulers;
    for (const auto& [id, st] : loop_.nodes()) {
      if (st.liveness == NodeLiveness::kDead && st.inventory.roles.Has(cluster::Role::kScheduler)) {
        dead_schedulers.push_back(id);
      }
    }
    store_->SetMembers(now, live_schedulers, dead_schedulers);
    ImportLegacyLocked(now);
    store_->Tick(now);
    FlushLocked();
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick);
  }
}

// The control loop: a step every reconcile interval, once the previous step's commands are
// answered.
void SchedulerService::RunControl() {
  while (true) {
    if (client_.commands_in_flight() == 0) ReconcileStep();
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.reconcile_interval);
    if (stopping_) return;
  }
}

void SchedulerService::ImportLegacyLocked(absl::Time now) {
  if (legacy_.empty() || !store_->ReadyToLead()) return;
  for (const StoreRecord& r : legacy_) store_->Put(now, r.key, r.value, /*expected_version=*/0);
  EXA_LOG_INFO("scheduler", "spec store: imported the records kept before the Raft log",
               {{"records", static_cast<int64_t>(legacy_.size())}});
  legacy_.clear();
}

void SchedulerService::LearnModels() {
  std::vector<InferenceReplicaSpec> unknown;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, r] : store_->Records()) {
      if (key.rfind(kSpecPrefix, 0) != 0) continue;
      auto specs = ParseSpecs(r.value, r.key);
      if (specs.ok() && specs->size() == 1 && !loop_.catalog().Find(specs->front().model).ok()) {
        unknown.push_back(specs->front());
      }
    }
  }
  for (const InferenceReplicaSpec& spec : unknown) {
    if (!ReplicaBytes(spec).ok()) continue;  // the status says why (ControlLoop::Spec)
    absl::MutexLock lock(&mu_);
    loop_.ForgetSpec(StrCat(kSpecPrefix, spec.name));
  }
}

void SchedulerService::ReconcileStep() {
  LearnModels();
  const std::vector<membership::Member> members = env_.members();
  std::map<std::string, std::string> addresses;
  const std::vector<NodeReport> reports = client_.Poll(members, &addresses);
  ControlInput in;
  in.reports = reports;
  in.members = &members;
  absl::ReleasableMutexLock lock(&mu_);
  in.now = absl::Now();
  in.state = &store_->Records();
  // The Raft leader reconciles, once it has applied a barrier of its term: its state then holds
  // every write acknowledged before. A scheduler cut off with a minority leads nothing.
  in.leader = store_->Leader();
  in.term = store_->Term();  // node agents refuse a deposed leader's late commands
  in.acting = store_->ReadyToLead();
  ControlOutput out = loop_.Step(in);
  for (const auto& [key, value] : out.writes) store_->Put(in.now, key, value);
  ExportLocked(out, in.acting);
  FlushLocked();  // rollout state written above
  if (out.actions.empty() && out.relabels.empty()) return;
  lock.Release();
  client_.Execute(out.actions, out.relabels, addresses, in.term,
                  [this](const NodeAction& a, const std::string& what, const std::string& error) {
                    absl::MutexLock l(&mu_);
                    const std::string deployment(SpecOfTrack(a.action.deployment));
                    if (a.action.kind == ActionKind::kPrestage) {
                      loop_.PrestageFailed(absl::Now(), deployment, what, error);
                    } else {
                      loop_.ActionFailed(absl::Now(), deployment, what, error);
                    }
                  });
}

void SchedulerService::ExportLocked(const ControlOutput& out, bool acting) {
  if (reconciler_gauge_) reconciler_gauge_->Set(acting ? 1 : 0);
  if (leaking_gauge_) leaking_gauge_->Set(static_cast<double>(loop_.leaking()));
  if (raft_term_gauge_) {
    raft_term_gauge_->Set(static_cast<double>(store_->Term()));
    raft_voters_gauge_->Set(store_->Voters());
    raft_applied_gauge_->Set(static_cast<double>(store_->AppliedIndex()));
  }
  if (rollbacks_) {
    for (const std::string& name : out.rollbacks) rollbacks_->WithLabels({name}).Increment();
  }
  if (replacements_) {
    for (const NodeAction& a : out.actions) {
      if (a.action.replacement == Replacement::kNone) continue;
      replacements_
          ->WithLabels({std::string(SpecOfTrack(a.action.deployment)),
                        std::string(ReplacementLabel(a.action.replacement))})
          .Increment();
    }
  }
  if (autoscale_desired_) {
    for (const AutoscaleReport& a : out.autoscaled) {
      autoscale_desired_->WithLabels({a.deployment}).Set(a.desired);
      if (a.last_time_to_ready_s >= 0) {
        autoscale_ready_after_->WithLabels({a.deployment}).Set(a.last_time_to_ready_s);
      }
      if (a.direction != 0) {
        autoscale_decisions_->WithLabels({a.deployment, a.direction > 0 ? "up" : "down"})
            .Increment();
      }
    }
    for (const std::string& name : out.gone) autoscale_desired_->WithLabels({name}).Set(0);
  }
  if (!desired_gauge_) return;
  for (const std::string& name : out.gone) {
    for (auto* g : {desired_gauge_, ready_gauge_, pending_gauge_}) g->WithLabels({name}).Set(0);
  }
  for (const auto& [name, s] : loop_.status()) {
    desired_gauge_->WithLabels({name}).Set(s.desired);
    // Ready on live nodes only: a suspected node's replicas keep their place (deadGrace) but
    // serve no one, and the replica alert must see them short at once.
    ready_gauge_->WithLabels({name}).Set(s.ready - s.ready_lost);
    pending_gauge_->WithLabels({name}).Set(s.pending);
  }
}

}  // namespace exa::scheduler
