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

namespace exa::scheduler {
namespace {

namespace pb = exaserve::v1;
using nlohmann::json;

constexpr std::string_view kSpecPrefix = "spec/";
constexpr std::string_view kNodePrefix = "node/";
constexpr std::string_view kRolloutPrefix = "rollout/";
constexpr std::string_view kRolloutCommandPrefix = "rollout-command/";
constexpr std::string_view kRoutePrefix = "route/";
constexpr size_t kMaxRoutes = 16;                            // the gateway's bound
constexpr std::string_view kLabelRulePrefix = "labelrule/";  // + the selector as JSON
constexpr size_t kMaxLabelRules = 64;
// Relabel calls one reconcile step may send (a new rule seen before the nodes report the labels
// `replica label` just set would otherwise fan out to every replica at once); the rest next step.
constexpr size_t kMaxRelabelsPerStep = 256;
// Set on every replica this service starts: only labelled replicas are managed (and stopped when
// their deployment goes away); a node's own replicas are left alone.
constexpr std::string_view kDeploymentLabel = "exaserve.io/deployment";

// A record's resource version: the index of the Raft log entry that wrote it.
std::string VersionString(const Version& v) { return StrCat(v.hlc.wall_us); }

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

std::string LabelRuleToJson(const cluster::LabelRule& rule) {
  return json{{"selector", rule.selector}, {"set", rule.set}, {"remove", rule.remove}}.dump();
}

std::optional<cluster::LabelRule> LabelRuleFromJson(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    cluster::LabelRule rule;
    rule.selector = j.value("selector", cluster::Labels{});
    rule.set = j.value("set", cluster::Labels{});
    rule.remove = j.value("remove", std::vector<std::string>{});
    return rule;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

void ToProto(const cluster::LabelRule& rule, pb::LabelReplicasRequest* out) {
  out->mutable_selector()->insert(rule.selector.begin(), rule.selector.end());
  out->mutable_labels()->insert(rule.set.begin(), rule.set.end());
  for (const std::string& k : rule.remove) out->add_remove(k);
}

std::string MemberGrpcAddress(const membership::Member& m) {
  if (m.metadata.grpc_port == 0) return "";
  return StrCat(membership::AddressHost(m.address), ":", m.metadata.grpc_port);
}

bool Live(const membership::Member& m) {
  return m.state == membership::MemberState::kAlive || m.state == membership::MemberState::kSuspect;
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

}  // namespace

// Peers send what they stored themselves; this guards the store against a broken or hostile
// sender.
absl::Status ValidateReplicated(const pb::ReplicateRequest& m, absl::Time now) {
  constexpr absl::Duration kMaxReplicatedClockLead = absl::Hours(1);
  const int64_t latest_us = absl::ToUnixMicros(now + kMaxReplicatedClockLead);
  for (const pb::StoreRecordProto& r : m.records()) {
    const std::string_view key = r.key();
    const auto has = [&](std::string_view prefix) {
      return key.size() > prefix.size() && key.substr(0, prefix.size()) == prefix;
    };
    if (!has(kSpecPrefix) && !has(kNodePrefix) && !has(kRolloutPrefix) &&
        !has(kRolloutCommandPrefix) && !has(kRoutePrefix) && !has(kLabelRulePrefix)) {
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
      catalog_(ModelCatalog::WithPresets()) {
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
  leaks_ = LeakDetector(options_.leaks);
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
      for (const auto& [name, st] : status_) {
        for (auto* g : {desired_gauge_, ready_gauge_, pending_gauge_}) g->WithLabels({name}).Set(0);
      }
    }
    if (reconciler_gauge_) reconciler_gauge_->Set(0);
    if (leaking_gauge_) leaking_gauge_->Set(0);
    leaks_ = LeakDetector(options_.leaks);
    status_.clear();
    reconciler_.clear();
  }
  for (auto& w : waiting) {
    w->reactor->Finish(grpc::Status(grpc::UNAVAILABLE, "the scheduler is stopping"));
  }
  for (auto* r : stopped_reads)
    r->Finish(grpc::Status(grpc::UNAVAILABLE, "the scheduler is stopping"));
  // Outstanding RPCs hold `this` in their callbacks.
  for (int i = 0; i < 500 && actions_in_flight_.load() > 0; ++i)
    absl::SleepFor(absl::Milliseconds(10));
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

std::shared_ptr<grpc::Channel> SchedulerService::ChannelFor(const std::string& address) {
  std::lock_guard<std::mutex> lock(channels_mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  // Bounded: nodes come and go; a full cache starts over (channels reconnect lazily).
  if (channels_.size() >= 4096) channels_.clear();
  // Keepalive: after a partition heals, a stop of a stale copy must not wait behind the old,
  // dead TCP connection (the network fault test saw 20-50 s without it).
  auto channel = net::NewChannel(address, net::PeerChannelArgs());
  channels_.emplace(address, channel);
  return channel;
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
    if (!o.ok && w->failure.empty()) w->failure = o.error;
    if (!w->ids.empty()) continue;
    done.emplace_back(
        w, w->failure.empty() ? grpc::Status::OK : grpc::Status(grpc::UNAVAILABLE, w->failure));
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
  for (StoreFrame& m : frames) {
    auto a = addresses.find(m.to);
    if (a == addresses.end() || a->second.empty()) continue;  // Raft sends again
    struct Call {
      grpc::ClientContext context;
      pb::ReplicateRequest request;
      pb::ReplicateResponse response;
      std::shared_ptr<grpc::Channel> channel;
    };
    auto call = std::make_shared<Call>();
    call->request.set_from(options_.node_id);
    call->request.set_type(pb::ReplicateRequest::RAFT);
    call->request.set_frame(std::move(m.bytes));
    call->context.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoNanoseconds(options_.rpc_timeout));
    if (!options_.node_token.empty()) {
      call->context.AddMetadata("authorization", StrCat("Bearer ", options_.node_token));
    }
    call->channel = ChannelFor(a->second);
    auto stub = pb::Scheduler::NewStub(call->channel);
    actions_in_flight_++;
    stub->async()->Replicate(&call->context, &call->request, &call->response,
                             [this, call](grpc::Status) { actions_in_flight_--; });
  }
}

void SchedulerService::WriteLocked(
    const std::vector<std::pair<std::string, std::optional<std::string>>>& writes,
    grpc::ServerUnaryReactor* reactor, std::unique_lock<std::mutex>& lock) {
  auto waiter = std::make_shared<WriteWaiter>();
  waiter->reactor = reactor;
  absl::Time now = absl::Now();
  for (const auto& [key, value] : writes) {
    std::optional<uint64_t> id = value ? store_->Put(now, key, *value) : store_->Delete(now, key);
    if (!id) {
      waiter->failure = StrCat("the spec store refused ", key, " (too many writes in flight)");
      continue;
    }
    waiter->ids.insert(*id);
    waiters_[*id] = waiter;
  }
  if (waiter->ids.empty()) {
    lock.unlock();
    reactor->Finish(waiter->failure.empty()
                        ? grpc::Status::OK
                        : grpc::Status(grpc::RESOURCE_EXHAUSTED, waiter->failure));
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
    if (catalog_.Find(spec.model).ok() &&
        (!from_store || store_versions_.count(model_version) > 0)) {
      return ReplicaBytesForSpec(spec, catalog_);
    }
  }
  if (!env_.model_shape) return catalog_.Find(spec.model).status();
  absl::StatusOr<ModelShape> shape = env_.model_shape(spec.model, spec.version);
  if (!shape.ok()) {
    return absl::NotFoundError(StrCat("spec.model: ", spec.model, "@", spec.version,
                                      " is neither a preset nor in the weights store (",
                                      shape.status().message(), ")"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  catalog_.Add(spec.model, *shape);
  store_models_.insert(spec.model);
  store_versions_.insert(model_version);
  return ReplicaBytesForSpec(spec, catalog_);
}

const SchedulerService::CachedSpec& SchedulerService::SpecLocked(const StoreRecord& record) {
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

std::map<std::string, SchedulerService::NodeOps> SchedulerService::NodeOpsLocked() const {
  std::map<std::string, NodeOps> out;
  for (const StoreRecord& r : store_->Live()) {
    if (r.key.rfind(kNodePrefix, 0) != 0) continue;
    json j = json::parse(r.value, nullptr, false);
    if (!j.is_object()) continue;
    NodeOps ops;
    ops.cordoned = j.value("cordoned", false);
    ops.draining = j.value("draining", false);
    if (j.contains("taints") && j["taints"].is_array()) {
      for (const auto& t : j["taints"]) {
        if (t.is_string()) ops.taints.push_back(t.get<std::string>());
      }
    }
    out[r.key.substr(kNodePrefix.size())] = std::move(ops);
  }
  return out;
}

void SchedulerService::ObserveMemoryLocked(absl::Time now, const std::string& node,
                                           const std::string& deployment,
                                           const pb::ReplicaStatus& r,
                                           std::set<std::string>* seen) {
  const std::string key = StrCat(node, "/", r.replica_id());
  seen->insert(key);
  const auto generation = static_cast<uint64_t>(std::max<int64_t>(0, r.generation()));
  if (!leaks_.Observe(key, generation, now, static_cast<uint64_t>(r.memory_bytes()))) return;
  const double growth = leaks_.Growth(key);
  const std::string message = StrCat(
      "memory leak suspected: ", r.replica_id(), " on ", node, " (generation ", generation,
      ") holds ", r.memory_bytes() >> 20, " MiB, ", std::lround(growth * 100),
      "% over its baseline, rising in ", options_.leaks.rising_samples, " samples in a row ",
      absl::FormatDuration(options_.leaks.interval), " apart; ",
      options_.recycle_leaking ? "replacing it (a surge copy on another node where memory allows)"
                               : "reported only (scheduler.leak_action: report)");
  EXA_LOG_WARN("scheduler", "memory leak suspected",
               {{"replica", r.replica_id()},
                {"node", node},
                {"memory_bytes", static_cast<int64_t>(r.memory_bytes())},
                {"growth", growth}});
  AddEventLocked(deployment, message);
}

void SchedulerService::AddEventLocked(const std::string& deployment, std::string message) {
  std::deque<Event>& q = events_[deployment];
  q.push_back({absl::Now(), std::move(message)});
  while (q.size() > options_.max_events) q.pop_front();
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
    MergeView(now, members, nodes_);
    // Dead schedulers leave the Raft configuration (the leader removes them, one at a time).
    std::vector<std::string> dead_schedulers;
    for (const auto& [id, st] : nodes_) {
      if (st.liveness == NodeLiveness::kDead && st.inventory.roles.Has(cluster::Role::kScheduler)) {
        dead_schedulers.push_back(id);
      }
    }
    store_->SetMembers(now, live_schedulers, dead_schedulers);
    ImportLegacyLocked(now);
    store_->Tick(now);
    FlushLocked(lock);
    if (now >= next_reconcile && actions_in_flight_.load() == 0) {
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
    for (const StoreRecord& r : store_->Live()) {
      if (r.key.rfind(kSpecPrefix, 0) != 0) continue;
      auto specs = ParseSpecs(r.value, r.key);
      if (specs.ok() && specs->size() == 1 && !catalog_.Find(specs->front().model).ok()) {
        unknown.push_back(specs->front());
      }
    }
  }
  for (const InferenceReplicaSpec& spec : unknown) {
    if (!ReplicaBytes(spec).ok()) continue;  // the status says why (SpecLocked)
    std::lock_guard<std::mutex> lock(mu_);
    specs_.erase(StrCat(kSpecPrefix, spec.name));
  }
}

// Every scheduler asks every node offering devices for its replicas, so whichever takes over as
// reconciler already has reports. Waits for every answer (each call has a deadline).
std::vector<std::shared_ptr<SchedulerService::NodePoll>> SchedulerService::PollNodes(
    const std::vector<membership::Member>& members, std::map<std::string, std::string>* addresses) {
  struct Polls {
    std::mutex mu;
    std::condition_variable cv;
    int outstanding = 0;
  };
  auto polls = std::make_shared<Polls>();
  std::vector<std::shared_ptr<NodePoll>> calls;
  for (const membership::Member& m : members) {
    if (!Live(m)) continue;
    std::string address = MemberGrpcAddress(m);
    if (address.empty() || m.metadata.gpus.count == 0) continue;
    (*addresses)[m.id] = address;
    auto poll = std::make_shared<NodePoll>();
    poll->node = m.id;
    poll->context.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoNanoseconds(options_.rpc_timeout));
    calls.push_back(poll);
  }
  polls->outstanding = static_cast<int>(calls.size());
  for (const auto& poll : calls) {
    auto stub = pb::Node::NewStub(ChannelFor((*addresses)[poll->node]));
    stub->async()->ListReplicas(&poll->context, &poll->request, &poll->response,
                                [poll, polls](grpc::Status s) {
                                  std::lock_guard<std::mutex> l(polls->mu);
                                  poll->status = std::move(s);
                                  poll->done = true;
                                  if (--polls->outstanding == 0) polls->cv.notify_all();
                                });
  }
  std::unique_lock<std::mutex> l(polls->mu);
  polls->cv.wait(l, [&] { return polls->outstanding == 0; });
  return calls;
}

void SchedulerService::ReconcileStep() {
  LearnModels();
  std::vector<membership::Member> members = env_.members();
  std::map<std::string, std::string> addresses;
  const std::vector<std::shared_ptr<NodePoll>> calls = PollNodes(members, &addresses);
  std::unique_lock<std::mutex> lock(mu_);
  absl::Time now = absl::Now();
  MergeView(now, members, nodes_);
  // The specs in the store that parse and plan.
  std::map<std::string, const DesiredDeployment*> specs;  // spec name → spec
  for (const StoreRecord& r : store_->Live()) {
    if (r.key.rfind(kSpecPrefix, 0) != 0) continue;
    const CachedSpec& c = SpecLocked(r);
    const std::string name = r.key.substr(kSpecPrefix.size());
    if (!c.desired.ok()) {
      auto& st = status_[name];
      st.name = name;
      st.pending_reason = std::string(c.desired.status().message());
      continue;
    }
    specs[name] = &*c.desired;
  }
  // Node reports: managed replicas (tracks "<spec>@<version>") and their latency samples.
  std::map<std::string, std::map<std::string, int>> ready_by_version;  // spec → version → ready
  const std::vector<cluster::LabelRule> rules = LabelRulesLocked();
  std::vector<Relabel> relabels;
  for (const auto& poll : calls) {
    if (!poll->done || !poll->status.ok()) continue;  // keeps its last report
    NodeStatus& st = nodes_[poll->node];
    st.reported = true;
    st.boot_id = poll->response.boot_id();
    NodeWeights& w = node_weights_[poll->node];
    w.pulls_models = poll->response.pulls_models();
    w.staged = {poll->response.staged_models().begin(), poll->response.staged_models().end()};
    for (const std::string& m : w.staged) {  // staged: a later need is news again
      prestage_announced_.erase(StrCat(poll->node, "\n", m));
      prestage_failures_.erase(StrCat("prestage ", m, " on ", poll->node));
    }
    st.replicas.clear();
    std::set<std::string> leak_seen;
    for (const pb::ReplicaStatus& r : poll->response.replicas()) {
      auto label = r.labels().find(std::string(kDeploymentLabel));
      if (label == r.labels().end()) continue;
      if (r.state() == "stopped") continue;
      ReplicaRecord rec;
      if (!ParseReplicaId(r.replica_id(), &rec.deployment, &rec.ordinal) ||
          rec.deployment != label->second) {
        continue;
      }
      rec.generation = static_cast<uint64_t>(std::max<int64_t>(0, r.generation()));
      rec.phase = PhaseOf(r.state());
      rec.phase_since = absl::FromUnixMillis(r.state_since_unix_ms());
      rec.allocation.node = poll->node;
      rec.allocation.gpus = {std::max(0, r.device())};
      const std::string spec_name(SpecOfTrack(rec.deployment));
      auto d = specs.find(spec_name);
      rec.allocation.bytes_per_gpu = d == specs.end() ? 0 : d->second->replica_bytes;
      generations_.Note(rec);
      if (r.state() == "draining") {  // holds memory and its generation until it is gone
        rec.stopping = true;
        st.replicas.push_back(std::move(rec));
        continue;
      }
      if (!rules.empty() && relabels.size() < kMaxRelabelsPerStep &&
          (r.state() == "ready" || r.state() == "unhealthy")) {
        // What the stored rules give it, against what it has: a node that missed a
        // `replica label` (down, partitioned) catches up here.
        const cluster::Labels current(r.labels().begin(), r.labels().end());
        // Rules never touch exaserve.io/ keys (ValidateChange), so neither does the change.
        cluster::LabelRule change = cluster::LabelChange(
            current, cluster::ApplyRules(rules, r.replica_id(), r.model(), r.version(), current));
        if (!change.set.empty() || !change.remove.empty()) {
          relabels.push_back({spec_name, poll->node, r.replica_id(), std::move(change)});
        }
      }
      if (rec.phase == ReplicaPhase::kReady && r.state() == "ready") {
        ready_by_version[spec_name][r.version()]++;
        // One sample per replica every observe/20 (1-30 s): the window then holds a whole
        // observation period of a large deployment (3072 replicas at 30 s: ~100 a second).
        const absl::Duration every = d == specs.end()
                                         ? absl::Seconds(30)
                                         : std::clamp(d->second->spec.rollout.observe / 20,
                                                      absl::Seconds(1), absl::Seconds(30));
        if (sampled_at_.size() > 100'000) sampled_at_.clear();  // bounded; refills in a step
        absl::Time& last = sampled_at_[StrCat(poll->node, "/", r.replica_id())];
        if (now - last >= every - absl::Milliseconds(100)) {
          last = now;
          window_.Add(ReplicaSample{
              now, r.version(), r.inter_token_p99_ms() > 0 ? r.inter_token_p99_ms() / 1000 : -1,
              r.recent_finished() > 0 ? r.error_rate() : -1,
              r.memory_bytes() > 0 ? static_cast<double>(r.memory_bytes()) : -1,
              r.ttft_p99_ms() > 0 ? r.ttft_p99_ms() / 1000 : -1});
        }
        if (r.memory_bytes() > 0) ObserveMemoryLocked(now, poll->node, spec_name, r, &leak_seen);
      }
      std::string key = StrCat(poll->node, "/", r.replica_id());
      rec.leaking = options_.recycle_leaking && rec.phase == ReplicaPhase::kReady &&
                    leaks_.Flagged(key, rec.generation);
      std::string phase = StrCat(r.state(), r.reason().empty() ? "" : ": ", r.reason());
      auto [it, inserted] = replica_phase_.try_emplace(key, phase);
      if (inserted || it->second != phase) {
        it->second = phase;
        AddEventLocked(spec_name, StrCat(r.replica_id(), " on ", poll->node, " (generation ",
                                         rec.generation, "): ", phase));
      }
      st.replicas.push_back(std::move(rec));
    }
    leaks_.ForgetMissing(StrCat(poll->node, "/"), leak_seen);
  }
  std::map<std::string, NodeOps> ops = NodeOpsLocked();
  // The Raft leader reconciles, once it has applied a barrier of its term: its state then holds
  // every write acknowledged before. A scheduler cut off with a minority leads nothing.
  const std::string leader = store_->Leader();
  if (leader != reconciler_) {
    EXA_LOG_INFO("scheduler", "reconciler",
                 {{"node", leader.empty() ? "none (no Raft leader in view)" : leader},
                  {"this_node", options_.node_id},
                  {"term", static_cast<int64_t>(store_->Term())}});
    reconciler_ = leader;
  }
  const bool acting = store_->ReadyToLead();

  // Desired state: one track per version of each spec, sized by its rollout (rollout.h). Only
  // the reconciler advances a rollout and stores it; the others follow the stored state.
  std::vector<DesiredDeployment> desired;
  std::set<std::string> weights;
  for (const auto& [name, d] : specs) {
    RolloutState state = RolloutStateLocked(name);
    if (acting) state = ApplyCommandsLocked(now, d->spec, std::move(state));
    RolloutStep step = AdvanceRollout(now, d->spec, state, ready_by_version[name], window_);
    if (acting) {
      for (std::string& e : step.events) AddEventLocked(name, std::move(e));
      if (step.rolled_back_now) {
        EXA_LOG_ERROR("scheduler", "rollout rolled back (P1)",
                      {{"deployment", name},
                       {"severity", "P1"},
                       {"version", step.state.failed_version},
                       {"reason", step.state.failure}});
        if (rollbacks_) rollbacks_->WithLabels({name}).Increment();
      }
      const std::string json = RolloutStateToJson(step.state);
      const StoreRecord* stored = store_->Get(StrCat(kRolloutPrefix, name));
      if (!stored || stored->value != json) store_->Put(now, StrCat(kRolloutPrefix, name), json);
    }
    for (const auto& [version, count] : step.tracks) {
      DesiredDeployment track = *d;
      track.spec.name = TrackName(name, version);
      track.spec.version = version;
      track.spec.replicas = count;
      weights.insert(WeightsKey(track.spec));
      desired.push_back(std::move(track));
    }
  }
  generations_.Attach(desired);
  std::vector<NodeStatus> statuses;
  for (auto& [id, st] : nodes_) {
    auto o = ops.find(id);
    if (o != ops.end()) {
      st.inventory.cordoned = o->second.cordoned;
      st.inventory.draining = o->second.draining;
      for (const std::string& t : o->second.taints) st.inventory.taints.push_back(t);
    }
    // What the node has pulled and verified; a node without a weights fetcher starts replicas
    // from directories of its own, so it counts as staged for everything.
    auto w = node_weights_.find(id);
    st.staged_models =
        w == node_weights_.end() || !w->second.pulls_models ? weights : w->second.staged;
    if (!st.inventory.gpus.empty()) statuses.push_back(st);
  }
  std::map<std::string, const DesiredDeployment*> by_track;
  for (const DesiredDeployment& d : desired) by_track[d.spec.name] = &d;
  ReconcileResult result = Reconcile(now, desired, statuses, options_.placement);

  // Status per spec: its tracks summed.
  std::map<std::string, DeploymentStatus> sums;
  for (const DeploymentStatus& t : result.deployments) {
    const std::string name(SpecOfTrack(t.name));
    DeploymentStatus& s = sums[name];
    s.name = name;
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
  for (const auto& [name, d] : specs) {
    sums[name].name = name;
    sums[name].desired = d->spec.replicas;
  }
  for (auto it = status_.begin(); it != status_.end();) {
    if (sums.count(it->first) || store_->Get(StrCat(kSpecPrefix, it->first))) {
      ++it;
      continue;
    }
    if (desired_gauge_) {
      for (auto* g : {desired_gauge_, ready_gauge_, pending_gauge_}) {
        g->WithLabels({it->first}).Set(0);
      }
    }
    it = status_.erase(it);
  }
  for (auto& [name, s] : sums) {
    auto& old = status_[name];
    if (s.pending > 0 && s.pending_reason != old.pending_reason) {
      AddEventLocked(name, StrCat("pending ", s.pending, ": ", s.pending_reason));
    }
    old = s;
    if (desired_gauge_) {
      desired_gauge_->WithLabels({name}).Set(s.desired);
      // Ready on live nodes only: a suspected node's replicas keep their place (deadGrace) but
      // serve no one, and the replica alert must see them short at once.
      ready_gauge_->WithLabels({name}).Set(s.ready - s.ready_lost);
      pending_gauge_->WithLabels({name}).Set(s.pending);
    }
  }
  if (reconciler_gauge_) reconciler_gauge_->Set(acting ? 1 : 0);
  if (leaking_gauge_) leaking_gauge_->Set(static_cast<double>(leaks_.FlaggedIds().size()));
  FlushLocked(lock);  // rollout state written above
  if (!acting || (result.actions.empty() && relabels.empty())) return;
  for (const Action& a : result.actions) {
    if (a.kind == ActionKind::kPrestage) {
      // Once per (node, model): the reconciler asks again every step until it is staged.
      if (prestage_announced_.size() > 10'000) prestage_announced_.clear();
      if (prestage_announced_.insert(StrCat(a.node, "\n", a.weights)).second) {
        AddEventLocked(std::string(SpecOfTrack(a.deployment)),
                       StrCat("prestage ", a.weights, " on ", a.node, ": ", a.reason));
      }
      continue;
    }
    if (replacements_ && a.replacement != Replacement::kNone) {
      replacements_
          ->WithLabels({std::string(SpecOfTrack(a.deployment)),
                        std::string(ReplacementLabel(a.replacement))})
          .Increment();
    }
    AddEventLocked(std::string(SpecOfTrack(a.deployment)),
                   StrCat(ActionKindName(a.kind), " ", a.replica_id(), " on ", a.node,
                          a.kind == ActionKind::kStart ? StrCat(" (generation ", a.generation, ")")
                                                       : std::string(),
                          ": ", a.reason));
  }
  for (const Relabel& r : relabels) {
    AddEventLocked(r.spec,
                   StrCat("relabel ", r.replica_id, " on ", r.node, " (stored label rules)"));
  }
  const uint64_t term = store_->Term();  // node agents refuse a deposed leader's late commands
  lock.unlock();
  Execute(result.actions, addresses, by_track, rules, relabels, term);
}

std::vector<cluster::LabelRule> SchedulerService::LabelRulesLocked(
    const std::optional<std::pair<std::string, cluster::LabelRule>>& pending) const {
  std::map<std::string, cluster::LabelRule> by_key;  // ordered by selector
  for (const StoreRecord& r : store_->Live()) {
    if (r.key.rfind(kLabelRulePrefix, 0) != 0) continue;
    std::optional<cluster::LabelRule> rule = LabelRuleFromJson(r.value);
    if (rule) by_key.emplace(r.key, std::move(*rule));
  }
  if (pending) by_key.insert_or_assign(pending->first, pending->second);
  std::vector<cluster::LabelRule> out;
  for (auto& [key, rule] : by_key) out.push_back(std::move(rule));
  return out;
}

RolloutState SchedulerService::RolloutStateLocked(const std::string& name) const {
  const StoreRecord* r = store_->Get(StrCat(kRolloutPrefix, name));
  if (!r) return RolloutState{};
  absl::StatusOr<RolloutState> s = RolloutStateFromJson(r->value);
  if (!s.ok()) {
    EXA_LOG_ERROR("scheduler", "rollout state unreadable; starting afresh",
                  {{"deployment", name}, {"error", std::string(s.status().message())}});
    return RolloutState{};
  }
  return *s;
}

RolloutState SchedulerService::ApplyCommandsLocked(absl::Time now, const InferenceReplicaSpec& spec,
                                                   RolloutState state) {
  const StoreRecord* r = store_->Get(StrCat(kRolloutCommandPrefix, spec.name));
  if (!r) return state;
  json j = json::parse(r->value, nullptr, false);
  if (!j.is_object()) return state;
  const uint64_t id = j.value("id", uint64_t{0});
  if (id <= state.last_command) return state;
  state.last_command = id;
  absl::StatusOr<RolloutCommand> command = ParseRolloutCommand(j.value("command", ""));
  if (!command.ok()) return state;
  absl::StatusOr<RolloutState> next = ApplyCommand(now, spec, state, *command, window_);
  if (!next.ok()) {
    AddEventLocked(spec.name, StrCat("rollout ", RolloutCommandName(*command),
                                     " ignored: ", next.status().message()));
    return state;
  }
  AddEventLocked(spec.name, StrCat("rollout ", RolloutCommandName(*command), " by the operator"));
  if (*command == RolloutCommand::kRollback && rollbacks_) {
    rollbacks_->WithLabels({spec.name}).Increment();
  }
  return *next;
}

// Admin.LabelReplicas for each running replica whose labels miss the stored rules.
void SchedulerService::SendRelabels(const std::vector<Relabel>& relabels,
                                    const std::map<std::string, std::string>& addresses) {
  for (const Relabel& fix : relabels) {
    auto address = addresses.find(fix.node);
    if (address == addresses.end()) continue;
    struct RelabelCall {
      grpc::ClientContext context;
      pb::LabelReplicasRequest request;
      pb::LabelReplicasResponse response;
    };
    auto call = std::make_shared<RelabelCall>();
    call->context.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoNanoseconds(options_.rpc_timeout));
    if (!options_.node_token.empty()) {
      call->context.AddMetadata("authorization", StrCat("Bearer ", options_.node_token));
    }
    (*call->request.mutable_selector())["replica"] = fix.replica_id;
    call->request.mutable_labels()->insert(fix.change.set.begin(), fix.change.set.end());
    for (const std::string& k : fix.change.remove) call->request.add_remove(k);
    auto stub = pb::Admin::NewStub(ChannelFor(address->second));
    actions_in_flight_++;
    stub->async()->LabelReplicas(
        &call->context, &call->request, &call->response, [this, call, fix](grpc::Status s) {
          if (!s.ok()) {
            EXA_LOG_WARN(
                "scheduler", "relabel failed",
                {{"replica", fix.replica_id}, {"node", fix.node}, {"error", s.error_message()}});
          }
          actions_in_flight_--;
        });
  }
}

void SchedulerService::Execute(const std::vector<Action>& actions,
                               const std::map<std::string, std::string>& addresses,
                               const std::map<std::string, const DesiredDeployment*>& desired,
                               const std::vector<cluster::LabelRule>& rules,
                               const std::vector<Relabel>& relabels, uint64_t term) {
  SendRelabels(relabels, addresses);
  struct Call {
    grpc::ClientContext context;
    pb::StartReplicaRequest start;
    pb::StopReplicaRequest stop;
    pb::ReplicaStatus response;
    pb::StageModelRequest stage;
    pb::StageModelResponse staged;
    std::string deployment;
    std::string what;
  };
  for (const Action& a : actions) {
    auto address = addresses.find(a.node);
    if (address == addresses.end()) continue;  // unreachable: the next step retries
    auto call = std::make_shared<Call>();
    call->deployment = a.deployment;
    call->what = a.kind == ActionKind::kPrestage
                     ? StrCat("prestage ", a.weights, " on ", a.node)
                     : StrCat(ActionKindName(a.kind), " ", a.replica_id(), " on ", a.node);
    call->context.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoNanoseconds(options_.rpc_timeout));
    if (!options_.node_token.empty()) {
      call->context.AddMetadata("authorization", StrCat("Bearer ", options_.node_token));
    }
    auto stub = pb::Node::NewStub(ChannelFor(address->second));
    auto done = [this, call](grpc::Status s) {
      if (!s.ok()) {
        EXA_LOG_WARN("scheduler", "action failed",
                     {{"action", call->what}, {"error", s.error_message()}});
        std::lock_guard<std::mutex> lock(mu_);
        AddEventLocked(std::string(SpecOfTrack(call->deployment)),
                       StrCat(call->what, " failed: ", s.error_message()));
      }
      actions_in_flight_--;
    };
    actions_in_flight_++;
    if (a.kind == ActionKind::kPrestage) {
      // The node pulls in the background; the reconciler asks again each step until the node
      // reports the model staged. A failure is an event once per reason.
      const size_t at = a.weights.rfind('@');
      call->stage.set_model(a.weights.substr(0, at));
      call->stage.set_version(at == std::string::npos ? "" : a.weights.substr(at + 1));
      call->stage.set_scheduler_term(term);
      stub->async()->StageModel(
          &call->context, &call->stage, &call->staged, [this, call](grpc::Status s) {
            std::string failure = !s.ok()                            ? s.error_message()
                                  : call->staged.state() == "failed" ? call->staged.reason()
                                                                     : "";
            if (!failure.empty()) {
              std::lock_guard<std::mutex> lock(mu_);
              if (prestage_failures_.size() > 10'000) prestage_failures_.clear();
              std::string& last = prestage_failures_[call->what];
              if (last != failure) {
                last = failure;
                EXA_LOG_WARN("scheduler", "pre-staging failed",
                             {{"action", call->what}, {"error", failure}});
                AddEventLocked(std::string(SpecOfTrack(call->deployment)),
                               StrCat(call->what, " failed: ", failure));
              }
            }
            actions_in_flight_--;
          });
      continue;
    }
    if (a.kind == ActionKind::kStart) {
      const InferenceReplicaSpec& spec = desired.at(a.deployment)->spec;
      pb::StartReplicaRequest& r = call->start;
      r.set_model(spec.model);
      r.set_version(spec.version);
      r.set_replica_id(a.replica_id());
      r.set_generation(static_cast<int64_t>(a.generation));
      r.set_scheduler_term(term);
      r.set_backend(spec.backend);
      if (spec.backend == "cuda" && !a.allocation.gpus.empty()) r.set_device(a.allocation.gpus[0]);
      cluster::Labels labels(spec.labels.begin(), spec.labels.end());
      labels["version"] = spec.version;
      labels[std::string(kDeploymentLabel)] = spec.name;
      // The stored label rules (`replica label`), so a rebuilt or added replica carries them;
      // none touches exaserve.io/ keys (ValidateChange), so the deployment label stays.
      labels =
          cluster::ApplyRules(rules, a.replica_id(), spec.model, spec.version, std::move(labels));
      r.mutable_labels()->insert(labels.begin(), labels.end());
      stub->async()->StartReplica(&call->context, &call->start, &call->response, done);
    } else {
      call->stop.set_replica_id(a.replica_id());
      call->stop.set_scheduler_term(term);
      stub->async()->StopReplica(&call->context, &call->stop, &call->response, done);
    }
  }
}

grpc::ServerUnaryReactor* SchedulerService::Apply(grpc::CallbackServerContext* context,
                                                  const pb::ApplyRequest* request,
                                                  pb::ApplyResponse* response) {
  if (grpc::Status s = CheckRunning(); !s.ok()) return Finish(context, s);
  if (auto s = Authorize(context, "Scheduler.Apply"); !s.ok()) return Finish(context, s);
  const std::string source = request->source().empty() ? "spec" : request->source();
  absl::StatusOr<std::vector<InferenceReplicaSpec>> specs = ParseSpecs(request->yaml(), source);
  if (!specs.ok()) return Finish(context, net::StatusToGrpc(specs.status()));
  if (specs->empty()) {
    return Finish(context, grpc::Status(grpc::INVALID_ARGUMENT,
                                        StrCat(source, ": no InferenceReplica document")));
  }
  // Every spec must plan (a known model, memory that covers the estimate) before any is written.
  for (const InferenceReplicaSpec& spec : *specs) {
    absl::StatusOr<uint64_t> bytes = ReplicaBytes(spec);
    if (!bytes.ok()) return Finish(context, net::StatusToGrpc(bytes.status()));
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> writes;
  std::unique_lock<std::mutex> lock(mu_);
  for (const InferenceReplicaSpec& spec : *specs) {
    const std::string key = StrCat(kSpecPrefix, spec.name);
    const std::string yaml = SpecToYaml(spec);
    pb::SpecChange* change = response->add_changes();
    change->set_name(spec.name);
    const StoreRecord* old = store_->Get(key);
    const RolloutState rollout = RolloutStateLocked(spec.name);
    const bool rolling =
        rollout.phase == RolloutPhase::kProgressing || rollout.phase == RolloutPhase::kObserving;
    if (rolling && spec.version != rollout.target_version &&
        spec.version != rollout.stable_version) {
      // Refused, not queued: the operator decides what happens to the running rollout.
      return Finish(
          context,
          grpc::Status(grpc::FAILED_PRECONDITION,
                       StrCat(spec.name, ": spec.version ", spec.version,
                              " refused: a rollout from ", rollout.stable_version, " to ",
                              rollout.target_version, " is in progress (stage ", rollout.stage + 1,
                              "); let it finish, or `exaserve-cli "
                              "rollout rollback ",
                              spec.name, "` first")));
    }
    // Written even when unchanged here: this scheduler's copy may be stale (cut off, lagging),
    // and only a write through the log makes the acknowledgement true
    // (docs/testing.md#control-plane).
    if (old && old->value == yaml) {
      change->set_action("unchanged");
    } else {
      change->set_action(old ? "updated" : "created");
      change->set_diff(LineDiff(old ? old->value : std::string(), yaml));
    }
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
  WriteLocked(writes, reactor, lock);
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
      s->set_version(VersionString(r.version));
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
  out["version"] = VersionString(r->version);
  out["reconciler"] = reconciler_;
  out["described_by"] = options_.node_id;
  int stopping = 0;  // draining after a stop, listed apart: they no longer count
  json replicas = json::parse(DescribeReplicasJson(nodes_, request.name(), &stopping));
  json status = json::object();
  auto st = status_.find(request.name());
  if (st != status_.end()) status = json::parse(DescribeStatusJson(st->second, stopping));
  out["status"] = status;
  out["replicas"] = replicas;
  out["rollout"] = json::parse(RolloutStateToJson(RolloutStateLocked(request.name())));
  json events = json::array();
  auto ev = events_.find(request.name());
  if (ev != events_.end()) {
    for (const Event& e : ev->second) {
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
  WriteLocked(writes, reactor, lock);
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
    list(NodeOpsLocked());
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
  if (!nodes_.count(request->node())) {
    return Finish(context,
                  grpc::Status(grpc::NOT_FOUND, StrCat("node ", request->node(),
                                                       " is not in this scheduler's view")));
  }
  std::map<std::string, NodeOps> all = NodeOpsLocked();
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
      for (const ReplicaRecord& r : nodes_[request->node()].replicas) {
        if (r.phase == ReplicaPhase::kReady) on_node[std::string(SpecOfTrack(r.deployment))]++;
      }
      for (const auto& [name, count] : on_node) {
        auto st = status_.find(name);
        if (st == status_.end()) continue;
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
  json value = {{"cordoned", ops.cordoned}, {"draining", ops.draining}, {"taints", ops.taints}};
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WriteLocked({{StrCat(kNodePrefix, request->node()), value.dump()}}, reactor, lock);
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
  const CachedSpec& c = SpecLocked(*r);
  if (!c.desired.ok()) return Finish(context, net::StatusToGrpc(c.desired.status()));
  const InferenceReplicaSpec& spec = c.desired->spec;
  RolloutState state = RolloutStateLocked(request->name());
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
    for (const MetricComparison& m : CompareNow(now, spec, state, window_)) {
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
    for (const auto& [id, node] : nodes_) {
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
  absl::StatusOr<RolloutState> next = ApplyCommand(now, spec, state, *command, window_);
  if (!next.ok()) return Finish(context, net::StatusToGrpc(next.status()));
  json cmd = {{"id", static_cast<uint64_t>(absl::ToUnixMicros(now))},
              {"command", RolloutCommandName(*command)}};
  response->set_json(RolloutStateToJson(*next));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WriteLocked({{StrCat(kRolloutCommandPrefix, spec.name), cmd.dump()}}, reactor, lock);
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
    size_t stored = 0;
    for (const StoreRecord& r : store_->Live()) stored += r.key.rfind(kRoutePrefix, 0) == 0;
    if (!store_->Get(key) && stored >= kMaxRoutes) {
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
    list(LabelRulesLocked());
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
    size_t rules_stored = 0;
    for (const StoreRecord& r : store_->Live()) {
      rules_stored += r.key.rfind(kLabelRulePrefix, 0) == 0;
    }
    if (rules_stored >= kMaxLabelRules) {
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
  list(LabelRulesLocked(std::make_pair(key, merged)));
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
