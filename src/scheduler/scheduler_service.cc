#include "scheduler/scheduler_service.h"

#include "scheduler/legacy_store.h"

#include <grpcpp/grpcpp.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "absl/strings/str_join.h"
#include "common/chars.h"
#include "common/logging.h"
#include "common/strings.h"
#include "exaserve/v1/admin.grpc.pb.h"
#include "exaserve/v1/node.grpc.pb.h"
#include "net/grpc_status.h"
#include "net/tls.h"
#include "nlohmann/json.hpp"
#include "scheduler/describe.h"
#include "scheduler/node_view.h"
#include "scheduler/spec_versions.h"

namespace exa::scheduler {
namespace {

namespace pb = exaserve::v1;
using nlohmann::json;

constexpr size_t kMaxRoutes = 16;  // the gateway's bound
constexpr size_t kMaxLabelRules = 64;

// Error messages quote what the caller sent (a spec or node name); a long one would push the
// status past gRPC's metadata limit, and the caller would get RESOURCE_EXHAUSTED about metadata
// instead of the error. Messages are cut to 1 KiB.
grpc::Status Clamped(const grpc::Status& s) {
  constexpr size_t kMaxMessage = 1024;
  if (s.error_message().size() <= kMaxMessage) return s;
  return grpc::Status(s.error_code(), StrCat(s.error_message().substr(0, kMaxMessage), "... (",
                                             s.error_message().size(), " bytes in all)"));
}

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const grpc::Status& s) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(Clamped(s));
  return reactor;
}

void ToProto(const cluster::LabelRule& rule, pb::LabelReplicasRequest* out) {
  out->mutable_selector()->insert(rule.selector.begin(), rule.selector.end());
  out->mutable_labels()->insert(rule.set.begin(), rule.set.end());
  for (const std::string& k : rule.remove) out->add_remove(k);
}

// "-old" / "+new" lines between two canonical YAML texts (a line-set diff: canonical YAML keeps
// every field in a fixed order, so changed lines are what changed).
std::string LineDiff(const std::string& before, const std::string& after) {
  auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  std::vector<std::string> a = lines(before), b = lines(after);
  std::multiset<std::string> in_a(a.begin(), a.end()), in_b(b.begin(), b.end());
  std::string out;
  for (const std::string& l : a) {
    if (!in_b.count(l)) StrAppend(&out, "-", l, "\n");
  }
  for (const std::string& l : b) {
    if (!in_a.count(l)) StrAppend(&out, "+", l, "\n");
  }
  return out;
}

}  // namespace

// Peers send what they stored themselves; this guards the store against a broken or hostile
// sender.
absl::Status ValidateReplicated(const pb::ReplicateRequest& m, absl::Time now) {
  constexpr absl::Duration kMaxReplicatedClockLead = absl::Hours(1);
  const int64_t latest_us = absl::ToUnixMicros(now + kMaxReplicatedClockLead);
  for (const pb::StoreRecordProto& r : m.records()) {
    const std::string_view key = r.key();
    const auto has = [&](std::string_view prefix) { return key.rfind(prefix, 0) == 0; };
    if (!IsStoreKey(key)) {
      return absl::InvalidArgumentError(StrCat("records: key \"", key.substr(0, 80),
                                               "\": not a kind of record the spec store keeps"));
    }
    if (r.version().wall_us() > latest_us) {
      return absl::InvalidArgumentError(StrCat("records: key \"", key.substr(0, 80), "\": version ",
                                               r.version().wall_us(), " us is more than ",
                                               absl::FormatDuration(kMaxReplicatedClockLead),
                                               " ahead of this scheduler's clock"));
    }
    if (r.deleted()) continue;
    if (FindInvalidUtf8(r.value()) != std::string_view::npos) {
      return absl::InvalidArgumentError(
          StrCat("records: key \"", key.substr(0, 80), "\": the value is not UTF-8"));
    }
    if (has(kSpecPrefix)) {
      auto specs = ParseSpecs(r.value(), key);
      if (!specs.ok()) {
        return absl::InvalidArgumentError(StrCat("records: ", specs.status().message()));
      }
    } else if (!json::parse(r.value(), nullptr, false).is_object()) {
      return absl::InvalidArgumentError(
          StrCat("records: key \"", key.substr(0, 80), "\": the value is not a JSON object"));
    }
  }
  return absl::OkStatus();
}

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
    reconciler_gauge_ = &r->SimpleGauge("exaserve_scheduler_reconciling",
                                        "1 on the scheduler that reconciles, else 0.");
    leaking_gauge_ = &r->SimpleGauge(
        "exaserve_scheduler_replicas_leaking",
        "Ready replicas whose memory rose in scheduler.leak_rising_samples samples in a row and "
        "by scheduler.leak_min_growth over its baseline (docs/architecture.md#leak-detection).");
  }
}

SchedulerService::~SchedulerService() { Stop(); }

void SchedulerService::Start() {
  std::lock_guard<std::mutex> serial(start_mu_);
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = false;
  }
  running_ = true;
  thread_ = std::thread([this] { Run(); });
}

void SchedulerService::Stop() {
  std::lock_guard<std::mutex> serial(start_mu_);
  running_ = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Calls still waiting for acknowledgements end now rather than hang.
  std::vector<std::shared_ptr<WriteWaiter>> waiting;
  std::vector<grpc::ServerUnaryReactor*> stopped_reads;
  {
    std::lock_guard<std::mutex> lock(mu_);
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

void SchedulerService::FlushLocked(std::unique_lock<std::mutex>& lock) {
  std::vector<WriteOutcome> outcomes = store_->TakeOutcomes();
  std::vector<StoreFrame> frames = store_->TakeFrames();
  std::vector<std::pair<std::shared_ptr<WriteWaiter>, grpc::Status>> done;
  std::vector<std::pair<grpc::ServerUnaryReactor*, grpc::Status>> reads;
  for (const WriteOutcome& o : outcomes) {
    if (auto r = readers_.find(o.id); r != readers_.end()) {
      reads.emplace_back(r->second.reactor,
                         o.ok ? r->second.answer() : grpc::Status(grpc::UNAVAILABLE, o.error));
      readers_.erase(r);
      continue;
    }
    auto it = waiters_.find(o.id);
    if (it == waiters_.end()) continue;
    std::shared_ptr<WriteWaiter> w = it->second;
    waiters_.erase(it);
    w->ids.erase(o.id);
    if (!o.ok && w->failure.ok()) w->failure = WriteFailure(o);
    if (!w->ids.empty()) continue;
    done.emplace_back(w, w->failure);
  }
  lock.unlock();
  Send(std::move(frames));
  for (auto& [w, status] : done) w->reactor->Finish(status);
  for (auto& [reactor, status] : reads) reactor->Finish(Clamped(status));
  lock.lock();
}

grpc::ServerUnaryReactor* SchedulerService::ReadThen(grpc::CallbackServerContext* context,
                                                     std::function<grpc::Status()> answer) {
  std::unique_lock<std::mutex> lock(mu_);
  std::optional<uint64_t> id = store_->Read(absl::Now());
  if (!id) {
    lock.unlock();
    return Finish(context, grpc::Status(grpc::RESOURCE_EXHAUSTED, "too many reads in flight"));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  readers_[*id] = {reactor, std::move(answer)};
  FlushLocked(lock);
  return reactor;
}

void SchedulerService::Send(std::vector<StoreFrame> frames) {
  if (frames.empty()) return;
  std::map<std::string, std::string> addresses;
  for (const membership::Member& m : env_.members()) addresses[m.id] = MemberGrpcAddress(m);
  for (StoreFrame& f : frames) {
    auto a = addresses.find(f.to);
    if (a == addresses.end() || a->second.empty()) continue;  // Raft sends again
    client_.SendFrame(a->second, std::move(f.bytes));
  }
}

void SchedulerService::WriteLocked(
    const std::vector<std::pair<std::string, std::optional<std::string>>>& writes,
    grpc::ServerUnaryReactor* reactor, std::unique_lock<std::mutex>& lock,
    const std::map<std::string, uint64_t>& expected) {
  auto waiter = std::make_shared<WriteWaiter>();
  waiter->reactor = reactor;
  absl::Time now = absl::Now();
  for (std::vector<consensus::KvOp>& ops : StoreTransactions(writes, expected)) {
    const std::string key = ops.front().key;
    std::optional<uint64_t> id = store_->Transact(now, std::move(ops));
    if (!id) {
      waiter->failure =
          grpc::Status(grpc::RESOURCE_EXHAUSTED,
                       StrCat("the spec store refused ", key, " (too many in flight)"));
      continue;
    }
    waiter->ids.insert(*id);
    waiters_[*id] = waiter;
  }
  if (waiter->ids.empty()) {
    lock.unlock();
    reactor->Finish(waiter->failure);
    lock.lock();
    return;
  }
  FlushLocked(lock);
}

absl::StatusOr<uint64_t> SchedulerService::ReplicaBytes(const InferenceReplicaSpec& spec) {
  const std::string model_version = StrCat(spec.model, "@", spec.version);
  {
    std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  loop_.catalog().Add(spec.model, *shape);
  store_models_.insert(spec.model);
  store_versions_.insert(model_version);
  return ReplicaBytesForSpec(spec, loop_.catalog());
}

void SchedulerService::Run() {
  absl::Time next_reconcile = absl::Now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    std::vector<membership::Member> members = env_.members();
    std::vector<std::string> live_schedulers;
    for (const membership::Member& m : members) {
      if (Live(m) && env_.is_scheduler(m)) live_schedulers.push_back(m.id);
    }
    lock.lock();
    absl::Time now = absl::Now();
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
    FlushLocked(lock);
    // A new step waits for the previous step's commands to be answered.
    if (now >= next_reconcile && client_.commands_in_flight() == 0) {
      lock.unlock();
      ReconcileStep();
      lock.lock();
      next_reconcile = absl::Now() + options_.reconcile_interval;
    }
    // Raft's timers (100 ms heartbeats) want ticks more often than the control loop needs.
    wake_.wait_for(lock, absl::ToChronoNanoseconds(std::min(options_.tick, absl::Milliseconds(50))),
                   [this] { return stopping_; });
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
    std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
    loop_.ForgetSpec(StrCat(kSpecPrefix, spec.name));
  }
}

void SchedulerService::ReconcileStep() {
  LearnModels();
  const std::vector<membership::Member> members = env_.members();
  std::map<std::string, std::string> addresses;
  ControlInput in;
  in.reports = client_.Poll(members, &addresses);
  in.members = &members;
  std::unique_lock<std::mutex> lock(mu_);
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
  FlushLocked(lock);  // rollout state written above
  if (out.actions.empty() && out.relabels.empty()) return;
  lock.unlock();
  client_.Execute(out.actions, out.relabels, addresses, in.term,
                  [this](const NodeAction& a, const std::string& what, const std::string& error) {
                    std::lock_guard<std::mutex> l(mu_);
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

grpc::ServerUnaryReactor* SchedulerService::Apply(grpc::CallbackServerContext* context,
                                                  const pb::ApplyRequest* request,
                                                  pb::ApplyResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  if (auto s = Authorize(context, "Scheduler.Apply"); !s.ok()) return Finish(context, s);
  const std::string source = request->source().empty() ? "spec" : request->source();
  ResourceVersions in_yaml;  // ParseSpecs refuses a file without a spec
  absl::StatusOr<std::vector<InferenceReplicaSpec>> specs =
      ParseSpecs(request->yaml(), source, &in_yaml);
  if (!specs.ok()) return Finish(context, net::StatusToGrpc(specs.status()));
  absl::StatusOr<ResourceVersions> named = NamedVersions(*request, *specs, std::move(in_yaml));
  if (!named.ok()) return Finish(context, net::StatusToGrpc(named.status()));
  // Every spec must plan (a known model, memory that covers the estimate) before any is written.
  for (const InferenceReplicaSpec& spec : *specs) {
    absl::StatusOr<uint64_t> bytes = ReplicaBytes(spec);
    if (!bytes.ok()) return Finish(context, net::StatusToGrpc(bytes.status()));
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> writes;
  std::map<std::string, uint64_t> expected;  // store key → the version the caller read
  std::unique_lock<std::mutex> lock(mu_);
  for (const InferenceReplicaSpec& spec : *specs) {
    const std::string key = StrCat(kSpecPrefix, spec.name);
    const std::string yaml = SpecToYaml(spec);
    pb::SpecChange* change = response->add_changes();
    change->set_name(spec.name);
    const StoreRecord* old = store_->Get(key);
    absl::Status rollout =
        CheckApplyDuringRollout(spec, RolloutStateIn(store_->Records(), spec.name));
    if (!rollout.ok()) return Finish(context, net::StatusToGrpc(rollout));
    auto n = named->find(spec.name);
    const bool same = old && old->value == yaml;
    if (same && (n == named->end() || n->second == ResourceVersion(old))) {
      change->set_action("unchanged");
      continue;
    }
    if (n != named->end()) {  // checked here for a dry run, in the Raft log for a write
      if (request->dry_run() && n->second != ResourceVersion(old)) {
        return Finish(context, ConflictStatus({key, n->second, ResourceVersion(old)}));
      }
      expected[key] = n->second;
    }
    change->set_action(same ? "unchanged" : old ? "updated" : "created");
    change->set_diff(LineDiff(old ? old->value : std::string(), yaml));
    writes.emplace_back(key, yaml);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (request->dry_run() || writes.empty()) {
    lock.unlock();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  for (const auto& [key, value] : writes) {
    AddEventLocked(key.substr(kSpecPrefix.size()), StrCat("spec written on ", options_.node_id));
  }
  WriteLocked(writes, reactor, lock, expected);
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::GetSpecs(grpc::CallbackServerContext* context,
                                                     const pb::GetSpecsRequest* request,
                                                     pb::GetSpecsResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  return ReadThen(context, [this, request, response]() {
    for (const StoreRecord& r : store_->Live()) {
      if (r.key.rfind(kSpecPrefix, 0) != 0) continue;
      std::string name = r.key.substr(kSpecPrefix.size());
      if (!request->name().empty() && name != request->name()) continue;
      pb::StoredSpec* s = response->add_specs();
      s->set_name(name);
      s->set_yaml(r.value);
      s->set_resource_version(ResourceVersion(&r));
      s->set_version(StrCat(s->resource_version()));
    }
    if (!request->name().empty() && response->specs().empty()) {
      return grpc::Status(grpc::NOT_FOUND, StrCat("no spec named ", request->name()));
    }
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* SchedulerService::Describe(grpc::CallbackServerContext* context,
                                                     const pb::DescribeRequest* request,
                                                     pb::DescribeResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  return ReadThen(context,
                  [this, request, response]() { return DescribeLocked(*request, response); });
}

grpc::Status SchedulerService::DescribeLocked(const pb::DescribeRequest& request,
                                              pb::DescribeResponse* response) {
  const StoreRecord* r = store_->Get(StrCat(kSpecPrefix, request.name()));
  if (!r) return grpc::Status(grpc::NOT_FOUND, StrCat("no spec named ", request.name()));
  json out;
  out["name"] = request.name();
  out["resource_version"] = ResourceVersion(r);
  out["version"] = StrCat(ResourceVersion(r));
  out["reconciler"] = loop_.reconciler();
  out["described_by"] = options_.node_id;
  int stopping = 0;  // draining after a stop, listed apart: they no longer count
  json replicas = json::parse(DescribeReplicasJson(loop_.nodes(), request.name(), &stopping));
  json status = json::object();
  auto st = loop_.status().find(request.name());
  if (st != loop_.status().end()) status = json::parse(DescribeStatusJson(st->second, stopping));
  out["status"] = status;
  out["replicas"] = replicas;
  out["rollout"] =
      json::parse(RolloutStateToJson(RolloutStateIn(store_->Records(), request.name())));
  json events = json::array();
  if (const auto* ev = loop_.events(request.name())) {
    for (const ControlLoop::Event& e : *ev) {
      events.push_back({{"time", absl::FormatTime(absl::RFC3339_sec, e.time, absl::UTCTimeZone())},
                        {"message", e.message}});
    }
  }
  out["events"] = events;
  response->set_json(out.dump());
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* SchedulerService::DeleteSpec(grpc::CallbackServerContext* context,
                                                       const pb::DeleteSpecRequest* request,
                                                       pb::DeleteSpecResponse*) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  if (auto s = Authorize(context, "Scheduler.DeleteSpec"); !s.ok()) return Finish(context, s);
  std::unique_lock<std::mutex> lock(mu_);
  const std::string key = StrCat(kSpecPrefix, request->name());
  if (!store_->Get(key)) {
    return Finish(context,
                  grpc::Status(grpc::NOT_FOUND, StrCat("no spec named ", request->name())));
  }
  AddEventLocked(request->name(), StrCat("spec deleted on ", options_.node_id));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::vector<std::pair<std::string, std::optional<std::string>>> writes = {{key, std::nullopt}};
  for (std::string_view prefix : {kRolloutPrefix, kRolloutCommandPrefix}) {
    std::string k = StrCat(prefix, request->name());
    if (store_->Get(k)) writes.emplace_back(k, std::nullopt);
  }
  // With a named version the spec and its rollout state go in one transaction: a stale version
  // leaves both as they are.
  std::map<std::string, uint64_t> expected;
  if (request->has_resource_version()) expected[key] = request->resource_version();
  WriteLocked(writes, reactor, lock, expected);
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::NodeOp(grpc::CallbackServerContext* context,
                                                   const pb::NodeOpRequest* request,
                                                   pb::NodeOpResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  auto list = [&](const std::map<std::string, NodeOps>& ops) {
    json out = json::array();
    for (const auto& [id, o] : ops) {
      out.push_back(
          {{"node", id}, {"cordoned", o.cordoned}, {"draining", o.draining}, {"taints", o.taints}});
    }
    response->set_json(out.dump());
  };
  if (request->op() == pb::NodeOpRequest::OP_LIST) {
    std::lock_guard<std::mutex> lock(mu_);
    list(NodeOpsIn(store_->Records()));
    return Finish(context, grpc::Status::OK);
  }
  if (auto s = Authorize(context, "Scheduler.NodeOp"); !s.ok()) return Finish(context, s);
  if (request->node().empty()) {
    return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT, "node: a node id is required"));
  }
  const bool taint_op = request->op() == pb::NodeOpRequest::OP_TAINT ||
                        request->op() == pb::NodeOpRequest::OP_UNTAINT;
  if (taint_op && (request->taint().empty() || request->taint().size() > 63 ||
                   !OnlyAlnumOr(request->taint(), "._/-"))) {
    return Finish(context,
                  grpc::Status(grpc::INVALID_ARGUMENT,
                               "taint: 1 to 63 of letters, digits, '.', '_', '/', '-', e.g. "
                               "\"maintenance\""));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!loop_.nodes().count(request->node())) {
    return Finish(context,
                  grpc::Status(grpc::NOT_FOUND, StrCat("node ", request->node(),
                                                       " is not in this scheduler's view")));
  }
  std::map<std::string, NodeOps> all = NodeOpsIn(store_->Records());
  NodeOps ops = all[request->node()];
  switch (request->op()) {
    case pb::NodeOpRequest::OP_CORDON:
      ops.cordoned = true;
      break;
    case pb::NodeOpRequest::OP_UNCORDON:
      ops.cordoned = false;
      ops.draining = false;
      break;
    case pb::NodeOpRequest::OP_TAINT:
      if (std::find(ops.taints.begin(), ops.taints.end(), request->taint()) == ops.taints.end()) {
        ops.taints.push_back(request->taint());
      }
      break;
    case pb::NodeOpRequest::OP_UNTAINT: {
      auto it = std::find(ops.taints.begin(), ops.taints.end(), request->taint());
      if (it == ops.taints.end()) {
        // A typo must not look like success (kubectl answers the same way).
        return Finish(context,
                      grpc::Status(grpc::NOT_FOUND,
                                   StrCat("node ", request->node(), " has no taint \"",
                                          request->taint(), "\" (its taints: ",
                                          ops.taints.empty() ? std::string("none")
                                                             : absl::StrJoin(ops.taints, ", "),
                                          ")")));
      }
      ops.taints.erase(it);
      break;
    }
    case pb::NodeOpRequest::OP_DRAIN: {
      // The availability floor: every deployment keeps ≥ 99 % of its desired
      // replicas ready once this node's are gone, or the drain is refused.
      std::map<std::string, int> on_node;
      for (const ReplicaRecord& r : loop_.nodes().at(request->node()).replicas) {
        if (r.phase == ReplicaPhase::kReady) on_node[std::string(SpecOfTrack(r.deployment))]++;
      }
      for (const auto& [name, count] : on_node) {
        auto st = loop_.status().find(name);
        if (st == loop_.status().end()) continue;
        const int after = st->second.ready - count;
        if (after * 100 < st->second.desired * 99) {
          return Finish(context, grpc::Status(grpc::FAILED_PRECONDITION,
                                              StrCat("drain ", request->node(), " refused: ", name,
                                                     " would have ", after, " of ",
                                                     st->second.desired, " replicas ready (", count,
                                                     " on this node), below the 99 % floor; add "
                                                     "capacity or scale it down first")));
        }
      }
      ops.cordoned = true;
      ops.draining = true;
      break;
    }
    default:
      return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT,
                                          "op: cordon, uncordon, drain, taint, untaint or list"));
  }
  all[request->node()] = ops;
  list(all);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WriteLocked({{StrCat(kNodePrefix, request->node()), NodeOpsToJson(ops)}}, reactor, lock);
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::Rollout(grpc::CallbackServerContext* context,
                                                    const pb::RolloutRequest* request,
                                                    pb::RolloutResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  const bool status_only = request->command().empty() || request->command() == "status";
  absl::StatusOr<RolloutCommand> command = RolloutCommand::kPause;
  if (!status_only) {
    if (auto s = Authorize(context, "Scheduler.Rollout"); !s.ok()) return Finish(context, s);
    command = ParseRolloutCommand(request->command());
    if (!command.ok()) return Finish(context, net::StatusToGrpc(command.status()));
  }
  std::unique_lock<std::mutex> lock(mu_);
  const StoreRecord* r = store_->Get(StrCat(kSpecPrefix, request->name()));
  if (!r) {
    return Finish(context,
                  grpc::Status(grpc::NOT_FOUND, StrCat("no spec named ", request->name())));
  }
  const ControlLoop::CachedSpec& c = loop_.Spec(*r);
  if (!c.desired.ok()) return Finish(context, net::StatusToGrpc(c.desired.status()));
  const InferenceReplicaSpec& spec = c.desired->spec;
  RolloutState state = RolloutStateIn(store_->Records(), request->name());
  const absl::Time now = absl::Now();
  if (status_only) {
    json out = json::parse(RolloutStateToJson(state));
    out["name"] = spec.name;
    out["spec_version"] = spec.version;
    std::vector<int> counts = RolloutStageCounts(spec);
    out["stages"] = counts;
    out["observe_s"] = absl::ToDoubleSeconds(spec.rollout.observe);
    out["threshold"] = spec.rollout.regression_threshold;
    json cmp = json::array();
    for (const MetricComparison& m : CompareNow(now, spec, state, loop_.window())) {
      cmp.push_back({{"metric", m.metric},
                     {"old", m.old_value},
                     {"new", m.new_value},
                     {"old_samples", m.old_samples},
                     {"new_samples", m.new_samples},
                     {"judged", m.judged},
                     {"regressed", m.regressed}});
    }
    out["window_so_far"] = cmp;
    json ready = json::object();
    for (const auto& [id, node] : loop_.nodes()) {
      for (const ReplicaRecord& rec : node.replicas) {
        if (rec.phase != ReplicaPhase::kReady) continue;
        if (SpecOfTrack(rec.deployment) != spec.name) continue;
        const std::string version(VersionOfTrack(rec.deployment));
        if (!version.empty()) ready[version] = ready.value(version, 0) + 1;
      }
    }
    out["ready"] = ready;
    response->set_json(out.dump());
    return Finish(context, grpc::Status::OK);
  }
  // Checked here for a clear answer; the reconciler applies it at its next step.
  absl::StatusOr<RolloutState> next = ApplyCommand(now, spec, state, *command, loop_.window());
  if (!next.ok()) return Finish(context, net::StatusToGrpc(next.status()));
  const std::string cmd =
      RolloutCommandToJson({static_cast<uint64_t>(absl::ToUnixMicros(now)), *command});
  response->set_json(RolloutStateToJson(*next));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WriteLocked({{StrCat(kRolloutCommandPrefix, spec.name), cmd}}, reactor, lock);
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::Routes(grpc::CallbackServerContext* context,
                                                   const pb::RoutesRequest* request,
                                                   pb::RoutesResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  auto list = [&](const std::vector<std::pair<std::string, std::optional<std::string>>>& pending) {
    std::map<std::string, std::string> routes;  // header → JSON
    for (const StoreRecord& r : store_->Live()) {
      if (r.key.rfind(kRoutePrefix, 0) == 0) routes[r.key.substr(kRoutePrefix.size())] = r.value;
    }
    for (const auto& [key, value] : pending) {
      std::string header = key.substr(kRoutePrefix.size());
      if (value) {
        routes[header] = *value;
      } else {
        routes.erase(header);
      }
    }
    if (routes.empty()) {
      pb::VersionRoute* d = response->add_routes();  // the gateways' default
      d->set_header("x-model-version");
      d->set_label("version");
      return;
    }
    for (const auto& [header, value] : routes) {
      json j = json::parse(value, nullptr, false);
      if (!j.is_object()) continue;
      pb::VersionRoute* r = response->add_routes();
      r->set_header(header);
      r->set_label(j.value("label", "version"));
      r->set_default_value(j.value("default", ""));
    }
  };
  if (request->op() == pb::RoutesRequest::OP_LIST) {
    std::lock_guard<std::mutex> lock(mu_);
    list({});
    return Finish(context, grpc::Status::OK);
  }
  if (auto s = Authorize(context, "Scheduler.Routes"); !s.ok()) return Finish(context, s);
  if (!env_.normalize_route) {
    return Finish(context, grpc::Status(grpc::FAILED_PRECONDITION, "routes are not enabled here"));
  }
  pb::VersionRoute route = request->route();
  if (request->op() == pb::RoutesRequest::OP_SET) {
    if (absl::Status s = env_.normalize_route(&route); !s.ok())
      return Finish(context, net::StatusToGrpc(s));
  } else if (request->op() == pb::RoutesRequest::OP_REMOVE) {
    pb::VersionRoute probe = route;
    probe.set_label("version");
    if (absl::Status s = env_.normalize_route(&probe); !s.ok())
      return Finish(context, net::StatusToGrpc(s));
    route.set_header(probe.header());
  } else {
    return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT, "op: list, set or remove"));
  }
  std::unique_lock<std::mutex> lock(mu_);
  const std::string key = StrCat(kRoutePrefix, route.header());
  std::vector<std::pair<std::string, std::optional<std::string>>> writes;
  if (request->op() == pb::RoutesRequest::OP_SET) {
    if (!store_->Get(key) && CountPrefix(store_->Records(), kRoutePrefix) >= kMaxRoutes) {
      return Finish(context, grpc::Status(grpc::RESOURCE_EXHAUSTED,
                                          StrCat("at most ", kMaxRoutes, " routes; remove one")));
    }
    writes.emplace_back(key,
                        json{{"label", route.label()}, {"default", route.default_value()}}.dump());
  } else {
    if (!store_->Get(key)) {
      return Finish(context,
                    grpc::Status(grpc::NOT_FOUND, StrCat("no route for header ", route.header())));
    }
    writes.emplace_back(key, std::nullopt);
  }
  list(writes);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WriteLocked(writes, reactor, lock);
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::LabelRules(grpc::CallbackServerContext* context,
                                                       const pb::LabelReplicasRequest* request,
                                                       pb::LabelRulesResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  const auto list = [&](const std::vector<cluster::LabelRule>& rules) {
    for (const cluster::LabelRule& r : rules) ToProto(r, response->add_rules());
  };
  if (request->labels().empty() && request->remove().empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    list(LabelRulesIn(store_->Records()));
    return Finish(context, grpc::Status::OK);
  }
  if (auto s = Authorize(context, "Scheduler.LabelRules"); !s.ok()) return Finish(context, s);
  cluster::LabelRule update;
  update.selector.insert(request->selector().begin(), request->selector().end());
  update.set.insert(request->labels().begin(), request->labels().end());
  update.remove.assign(request->remove().begin(), request->remove().end());
  if (absl::Status s = cluster::ValidateChange(update.set, update.remove); !s.ok()) {
    return Finish(context, net::StatusToGrpc(s));
  }
  if (absl::Status s = cluster::ValidateLabels(update.selector); !s.ok()) {
    return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT, StrCat("selector: ", s.message())));
  }
  std::unique_lock<std::mutex> lock(mu_);
  const std::string key = StrCat(kLabelRulePrefix, json(update.selector).dump());
  cluster::LabelRule merged = update;
  if (const StoreRecord* stored = store_->Get(key)) {
    if (std::optional<cluster::LabelRule> old = LabelRuleFromJson(stored->value)) {
      merged = cluster::MergeRule(std::move(*old), update);
    }
  } else {
    if (CountPrefix(store_->Records(), kLabelRulePrefix) >= kMaxLabelRules) {
      return Finish(context, grpc::Status(grpc::RESOURCE_EXHAUSTED,
                                          StrCat("at most ", kMaxLabelRules,
                                                 " label rules (one per selector)")));
    }
  }
  if (merged.set.size() > cluster::kMaxLabelsPerReplica) {
    return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT,
                                        StrCat("labels: at most ", cluster::kMaxLabelsPerReplica,
                                               " per rule")));
  }
  list(LabelRulesIn(store_->Records(), std::make_pair(key, merged)));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WriteLocked({{key, LabelRuleToJson(merged)}}, reactor, lock);
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::Replicate(grpc::CallbackServerContext* context,
                                                      const pb::ReplicateRequest* request,
                                                      pb::ReplicateResponse*) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  if (auto s = Authorize(context, "Scheduler.Replicate"); !s.ok()) return Finish(context, s);
  if (request->from().empty() || request->from().size() > 255) {
    return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT, "from: 1 to 255 bytes, required"));
  }
  if (request->type() != pb::ReplicateRequest::RAFT) {
    return Finish(context,
                  grpc::Status(grpc::FAILED_PRECONDITION,
                               "type: this scheduler keeps its specs in a Raft log and "
                               "takes RAFT frames only (the sender runs an older version)"));
  }
  const absl::Time now = absl::Now();
  if (absl::Status s = ValidateReplicated(*request, now); !s.ok()) {
    EXA_LOG_WARN("scheduler", "replicated records refused",
                 {{"from", request->from().substr(0, 80)}, {"error", std::string(s.message())}});
    return Finish(context, net::StatusToGrpc(s));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (absl::Status s = store_->Handle(now, request->from(), request->frame()); !s.ok()) {
    EXA_LOG_WARN("scheduler", "spec store frame refused",
                 {{"from", request->from().substr(0, 80)}, {"error", std::string(s.message())}});
    lock.unlock();
    return Finish(context, net::StatusToGrpc(s));
  }
  FlushLocked(lock);
  return Finish(context, grpc::Status::OK);
}

}  // namespace exa::scheduler
