#include "gateway/remote_backend.h"

#include <cstdint>
#include <map>
#include <random>
#include <set>

#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/rpc/generate_stream.h"
#include "engine/tokenizer/tokenizer.h"
#include "net/grpc_status.h"
#include "net/tls.h"

namespace exa::gateway {
namespace {

using exaserve::v1::GenerateResponse;
using exaserve::v1::LoadReport;

uint64_t NewDispatcherId() {
  std::random_device device;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{device()} << 32) ^ device();
  return id;
}

constexpr absl::Duration kRetryLoadStreamAfter = absl::Seconds(1);
constexpr absl::Duration kDescribeTimeout = absl::Seconds(10);
// A tokenizer.json can be tens of MiB for large vocabularies.
constexpr int kMaxDescribeBytes = 64 << 20;

std::string ModelKey(const std::string& name, const std::string& version) {
  return StrCat(name, "@", version);
}

}  // namespace

absl::StatusOr<PrefixCacheDelta> PrefixCacheDeltaFromProto(
    const exaserve::v1::PrefixCacheDelta& p) {
  const std::string& hashes = p.hashes();
  if (hashes.size() % 8 != 0) {
    return absl::InvalidArgumentError(
        StrCat("cache_delta.hashes: ", hashes.size(), " bytes; a multiple of 8 expected"));
  }
  const size_t n = hashes.size() / 8;
  PrefixCacheDelta d;
  d.snapshot = p.snapshot();
  if (d.snapshot) {
    if (!p.evicted_bits().empty()) {
      return absl::InvalidArgumentError("cache_delta.evicted_bits: set on a snapshot");
    }
    if (p.report_every_blocks() < 1 || p.report_every_blocks() > 1024) {
      return absl::InvalidArgumentError(StrCat(
          "cache_delta.report_every_blocks: ", p.report_every_blocks(), "; expected 1-1024"));
    }
    if (p.report_max_every_blocks() > 65536) {
      return absl::InvalidArgumentError(StrCat("cache_delta.report_max_every_blocks: ",
                                               p.report_max_every_blocks(), "; expected 0-65536"));
    }
    if (p.cache_namespace().size() > 1024) {
      return absl::InvalidArgumentError(
          StrCat("cache_delta.cache_namespace: ", p.cache_namespace().size(),
                 " bytes; at most 1024 expected"));
    }
    d.epoch = p.epoch();
    d.to = p.to_seq();
    // 0 (a node that does not send it): a fixed stride.
    d.report =
        ReportSchedule{
            static_cast<int32_t>(p.report_every_blocks()),
            static_cast<int32_t>(std::max(p.report_every_blocks(), p.report_max_every_blocks()))}
            .Normalized();
    d.cache_namespace = p.cache_namespace();
  } else {
    if (p.evicted_bits().size() != (n + 7) / 8) {
      return absl::InvalidArgumentError(
          StrCat("cache_delta.evicted_bits: ", p.evicted_bits().size(), " bytes for ", n,
                 " events; ", (n + 7) / 8, " expected"));
    }
    if (p.from_seq() > UINT64_MAX - n) {
      return absl::InvalidArgumentError(
          StrCat("cache_delta.from_seq: ", p.from_seq(), " overflows with ", n, " events"));
    }
    d.from = p.from_seq();
    d.to = d.from + n;
  }
  d.events.resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t hi = 0;  // the hash's first 8 bytes: what reports carry and indexes key on
    for (size_t b = 0; b < 8; ++b) hi = (hi << 8) | static_cast<unsigned char>(hashes[8 * i + b]);
    d.events[i].hash = Hash128{hi, 0};
    d.events[i].stored =
        d.snapshot || (static_cast<unsigned char>(p.evicted_bits()[i / 8]) >> (i % 8) & 1) == 0;
  }
  return d;
}

// ---- Peer: one node that hosts replicas ---------------------------------------------------------

// One WatchLoad attempt; it deletes itself when gRPC is done with it.
class LoadWatch final : public grpc::ClientReadReactor<LoadReport> {
 public:
  explicit LoadWatch(std::shared_ptr<RemoteBackend::Peer> peer) : peer_(std::move(peer)) {}
  void Start(exaserve::v1::Node::Stub& stub);
  void Cancel() { context_.TryCancel(); }
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  std::shared_ptr<RemoteBackend::Peer> peer_;
  grpc::ClientContext context_;
  exaserve::v1::WatchLoadRequest request_;
  LoadReport report_;
};

class RemoteBackend::Peer : public std::enable_shared_from_this<Peer> {
 public:
  Peer(RemoteBackend* owner, std::string node_id, std::string target)
      : owner_(owner), node_id_(std::move(node_id)), target_(std::move(target)) {
    channel_ = owner_->ChannelFor(target_);
    stub_ = exaserve::v1::Node::NewStub(channel_);
  }

  const std::string& node_id() const { return node_id_; }
  uint64_t dispatcher() const { return owner_->dispatcher_; }
  const std::string& target() const { return target_; }
  exaserve::v1::Node::Stub& stub() { return *stub_; }

  // Opens the load stream (and asks for the models once) unless one is open or backing off.
  void Connect(absl::Time now) {
    absl::MutexLock lock(&mu_);
    if (shutdown_ || watch_ != nullptr || now < retry_at_) return;
    if (!described_ && !describing_) Describe();
    watch_ = new LoadWatch(shared_from_this());
    owner_->reactors_open_++;
    watch_->Start(*stub_);
  }

  void ApplyReport(const LoadReport& report) {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    std::set<std::string> seen;
    bool unknown_model = false;
    for (const auto& r : report.replicas()) {
      seen.insert(r.replica_id());
      unknown_model |= described_ && described_models_.count(ModelKey(r.model(), r.version())) == 0;
      std::map<std::string, std::string> labels(r.labels().begin(), r.labels().end());
      auto known = replicas_.find(r.replica_id());
      if (known == replicas_.end()) {
        owner_->SetRoute(r.replica_id(), node_id_);
        owner_->table_.Upsert({r.replica_id(), r.model(), r.version(), labels});
        owner_->table_.SetHealthy(r.replica_id(), !suspect_);
        replicas_.emplace(r.replica_id(), std::move(labels));
      } else if (known->second != labels) {
        // Relabelled (replica label, a label rule): version routing follows at this report.
        owner_->table_.Upsert({r.replica_id(), r.model(), r.version(), labels});
        known->second = std::move(labels);
      }
      router::LoadReport load{r.pending_tokens(),
                              r.running_sequences() + r.waiting_sequences(),
                              r.ready() && described_,
                              r.blocked_sequences(),
                              r.ttft_p99_ms(),
                              r.inter_token_p99_ms(),
                              std::max(0, r.max_running_sequences())};
      if (r.has_admitted_dispatch()) load.admitted_dispatch = r.admitted_dispatch();
      owner_->table_.Report(r.replica_id(), load);
      if (r.has_cache_delta()) ApplyCacheDelta(r.replica_id(), r.cache_delta());
    }
    // A replica of a model this node did not serve when we asked (StartReplica since): ask again
    // for its tokenizer, at most once a second (a tokenizer we refuse stays unknown).
    const absl::Time now = absl::Now();
    if (unknown_model && !describing_ && now - last_describe_ >= absl::Seconds(1)) Describe();
    for (auto it = replicas_.begin(); it != replicas_.end();) {
      if (seen.count(it->first) == 0) {
        owner_->table_.Remove(it->first);
        owner_->prefix_index_.Remove(it->first);
        owner_->ClearRoute(it->first);
        it = replicas_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // A replica's cached-block delta into the gateway's index. One that does not follow what the
  // index has, or cannot be read, ends the stream: the next one starts with snapshots.
  void ApplyCacheDelta(const std::string& replica_id, const exaserve::v1::PrefixCacheDelta& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<PrefixCacheDelta> d = PrefixCacheDeltaFromProto(p);
    if (d.ok() &&
        owner_->prefix_index_.Apply(replica_id, *d) == router::PrefixIndex::Applied::kApplied) {
      return;
    }
    owner_->prefix_index_.Remove(replica_id);
    owner_->cache_resyncs_.Increment();
    EXA_LOG_WARN(
        "gateway", "cached-block report out of step; resynchronising",
        {{"node", node_id_},
         {"replica", replica_id},
         {"error", d.ok() ? std::string("gap") : std::string(ToStd(d.status().message()))}});
    if (watch_ != nullptr) watch_->Cancel();
  }

  // The load stream ended: nothing here is routable until it is back.
  void OnWatchEnd(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      watch_ = nullptr;
      retry_at_ = absl::Now() + kRetryLoadStreamAfter;
      for (const auto& [id, labels] : replicas_) owner_->table_.Report(id, {0, 0, false});
      if (!shutdown_) {
        owner_->stream_breaks_.Increment();
        EXA_LOG_WARN("gateway", "load stream ended",
                     {{"node", node_id_}, {"target", target_}, {"status", status.error_message()}});
      }
    }
  }
  // The watch is deleted: the backend may now finish stopping.
  void OnWatchClosed() { owner_->reactors_open_--; }

  // Membership suspects the node: out of routing now, back when it refutes.
  void SetSuspect(bool suspect) {
    absl::MutexLock lock(&mu_);
    if (suspect_ == suspect) return;
    suspect_ = suspect;
    for (const auto& [id, labels] : replicas_) owner_->table_.SetHealthy(id, !suspect);
  }

  // The node is dead or gone: stop watching and forget its replicas.
  void Shutdown() {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    if (watch_ != nullptr) watch_->Cancel();
    for (const auto& [id, labels] : replicas_) {
      owner_->table_.Remove(id);
      owner_->ClearRoute(id);
    }
    replicas_.clear();
  }

  bool watching() const {
    absl::MutexLock lock(&mu_);
    return watch_ != nullptr;
  }

 private:
  void Describe() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    describing_ = true;
    last_describe_ = absl::Now();
    struct Pending {
      grpc::ClientContext context;
      exaserve::v1::DescribeModelsRequest request;
      exaserve::v1::DescribeModelsResponse response;
    };
    auto pending = std::make_shared<Pending>();
    owner_->reactors_open_++;
    pending->context.set_deadline(absl::ToChronoTime(absl::Now() + kDescribeTimeout));
    stub_->async()->DescribeModels(
        &pending->context, &pending->request, &pending->response,
        [self = shared_from_this(), pending](grpc::Status status) {
          if (status.ok()) self->owner_->OnModels(self->node_id_, pending->response);
          {
            absl::MutexLock lock(&self->mu_);
            self->describing_ = false;
            self->described_ = status.ok();
            if (status.ok()) {
              self->described_models_.clear();
              for (const auto& m : pending->response.models()) {
                self->described_models_.insert(ModelKey(m.name(), m.version()));
              }
            }
          }
          if (!status.ok()) {
            EXA_LOG_WARN("gateway", "DescribeModels failed",
                         {{"node", self->node_id_}, {"status", status.error_message()}});
          }
          self->owner_->reactors_open_--;
        });
  }

  RemoteBackend* const owner_;
  const std::string node_id_, target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<exaserve::v1::Node::Stub> stub_;
  mutable absl::Mutex mu_;
  LoadWatch* watch_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The replicas this node reported, with the labels of the last report.
  std::map<std::string, std::map<std::string, std::string>> replicas_ ABSL_GUARDED_BY(mu_);
  bool suspect_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool described_ ABSL_GUARDED_BY(mu_) = false;
  bool describing_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> described_models_ ABSL_GUARDED_BY(mu_);  // model@version keys
  absl::Time last_describe_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

void LoadWatch::Start(exaserve::v1::Node::Stub& stub) {
  request_.set_max_rate_hz(50);
  request_.set_dispatcher(peer_->dispatcher());
  stub.async()->WatchLoad(&context_, &request_, this);
  StartRead(&report_);
  StartCall();
}

void LoadWatch::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows with the status
  peer_->ApplyReport(report_);
  StartRead(&report_);
}

void LoadWatch::OnDone(const grpc::Status& status) {
  // Unlink from the peer first (under its lock), so Peer::Shutdown never cancels a deleted watch.
  std::shared_ptr<RemoteBackend::Peer> peer = std::move(peer_);
  peer->OnWatchEnd(status);
  delete this;
  peer->OnWatchClosed();
}

// ---- RemoteCall: one Generate stream to a replica on another node ------------------------------

class RemoteBackend::RemoteCall final : public grpc::ClientReadReactor<GenerateResponse> {
 public:
  RemoteCall(RemoteBackend* owner, engine::RequestId id, std::string replica_id,
             std::string node_id, engine::StreamCallback callback)
      : owner_(owner),
        id_(id),
        replica_id_(std::move(replica_id)),
        node_id_(std::move(node_id)),
        callback_(std::move(callback)) {}

  void Start(exaserve::v1::Node::Stub& stub, exaserve::v1::NodeGenerateRequest request) {
    request_ = std::move(request);
    // Fail at once when the node cannot be reached, so the gateway retries elsewhere.
    context_.set_wait_for_ready(false);
    if (!request_.request().request_id().empty()) {
      context_.AddMetadata("x-request-id", request_.request().request_id());
    }
    stub.async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  void Cancel() {
    cancelled_ = true;
    context_.TryCancel();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    const GenerateResponse& r = response_;
    if (r.finish_reason() != exaserve::v1::FINISH_REASON_UNSPECIFIED) {
      final_reason_ = engine::rpc::FinishReasonFromProto(r.finish_reason());
      prompt_tokens_ = r.usage().prompt_tokens();
      completion_tokens_ = r.usage().completion_tokens();
    }
    int n = r.token_ids_size();
    for (int i = 0; i < n || (i == 0 && !r.text().empty()); ++i) {
      engine::StreamEvent e;
      e.id = id_;
      e.time = absl::Now();
      e.token = i < n ? r.token_ids(i) : -1;
      if (i < r.logprobs_size()) e.logprob = r.logprobs(i);
      if (i < r.top_logprobs_size()) {
        e.top_logprobs = engine::rpc::TopLogprobsFromProto(r.top_logprobs(i));
      }
      if (i + 1 >= n) e.text = r.text();
      if (e.token >= 0) tokens_++;
      callback_(e);
    }
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    engine::StreamEvent e;
    e.id = id_;
    e.time = absl::Now();
    e.finished = true;
    e.prompt_tokens = prompt_tokens_;
    e.completion_tokens = completion_tokens_ > 0 ? completion_tokens_ : tokens_;
    if (status.ok()) {
      e.finish_reason = final_reason_ == engine::FinishReason::kNone ? engine::FinishReason::kStop
                                                                     : final_reason_;
    } else if (cancelled_) {
      e.finish_reason = engine::FinishReason::kCancelled;
      e.status = absl::CancelledError("request cancelled");
    } else {
      bool node_failed =
          status.error_code() == grpc::UNAVAILABLE || status.error_code() == grpc::CANCELLED ||
          status.error_code() == grpc::UNKNOWN || status.error_code() == grpc::INTERNAL;
      e.finish_reason = final_reason_ == engine::FinishReason::kNone ? engine::FinishReason::kError
                                                                     : final_reason_;
      e.status = node_failed
                     ? absl::UnavailableError(StrCat("replica ", replica_id_, " on node ", node_id_,
                                                     " failed: ", status.error_message()))
                     : net::StatusFromGrpc(status);
      owner_->remote_failures_.Increment();
    }
    callback_(e);
    owner_->ForgetCall(id_);  // may delete this: nothing after it
  }

 private:
  RemoteBackend* const owner_;
  const engine::RequestId id_;
  const std::string replica_id_, node_id_;
  engine::StreamCallback callback_;
  grpc::ClientContext context_;
  exaserve::v1::NodeGenerateRequest request_;
  GenerateResponse response_;
  std::atomic<bool> cancelled_{false};
  engine::FinishReason final_reason_ = engine::FinishReason::kNone;
  int32_t prompt_tokens_ = 0, completion_tokens_ = 0, tokens_ = 0;
};

// ---- RemoteBackend ------------------------------------------------------------------------------

RemoteBackend::RemoteBackend(std::string self_node_id, ReplicaBackend* local,
                             router::ReplicaTable& table, router::PrefixIndex& prefix_index,
                             metrics::Registry& registry)
    : self_node_id_(std::move(self_node_id)),
      dispatcher_(NewDispatcherId()),
      local_(local),
      table_(table),
      prefix_index_(prefix_index),
      stream_breaks_(registry.SimpleCounter(
          "exaserve_gateway_load_stream_breaks_total",
          "Node load streams that ended unexpectedly (the node's replicas left routing).")),
      cache_resyncs_(registry.SimpleCounter(
          "exaserve_gateway_prefix_cache_resyncs_total",
          "Replica cached-block reports out of step (a load stream restarted to resynchronise).")),
      remote_calls_(registry.SimpleCounter("exaserve_gateway_remote_calls_total",
                                           "Generate calls sent to replicas on other nodes.")),
      remote_failures_(registry.SimpleCounter(
          "exaserve_gateway_remote_failures_total",
          "Generate calls to other nodes that ended with an error (before any retry).")) {
  registry.AddGaugeCallback("exaserve_gateway_watched_nodes",
                            "Nodes whose load stream this gateway has open.",
                            [this] { return static_cast<double>(watched_nodes()); });
}

RemoteBackend::~RemoteBackend() { Stop(); }

std::shared_ptr<grpc::Channel> RemoteBackend::ChannelFor(const std::string& target) {
  absl::MutexLock lock(&channels_mu_);
  auto it = channels_.find(target);
  if (it != channels_.end()) return it->second;
  // Bounded: a cluster that churned through this many addresses starts over.
  if (channels_.size() >= kMaxChannels) channels_.clear();
  // Notice a dead peer on an idle connection within seconds, not at the TCP timeout.
  grpc::ChannelArguments args = net::PeerChannelArgs();
  args.SetMaxReceiveMessageSize(kMaxDescribeBytes);
  auto channel = net::NewChannel(target, args);
  channels_.emplace(target, channel);
  return channel;
}

void RemoteBackend::UpdateMembers(const std::vector<membership::Member>& members, absl::Time now) {
  std::vector<std::shared_ptr<Peer>> connect, gone;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    std::set<std::string> present;
    for (const membership::Member& m : members) {
      bool live = m.state == membership::MemberState::kAlive ||
                  m.state == membership::MemberState::kSuspect;
      if (m.id == self_node_id_ || !live || m.metadata.grpc_port == 0 ||
          m.metadata.replicas.hosted == 0) {
        continue;
      }
      std::string target = StrCat(membership::AddressHost(m.address), ":", m.metadata.grpc_port);
      auto it = peers_.find(m.id);
      if (it != peers_.end() && it->second->target() != target) {
        gone.push_back(it->second);  // same node, new address: a restart elsewhere
        peers_.erase(it);
        it = peers_.end();
      }
      if (it == peers_.end()) {
        it = peers_.emplace(m.id, std::make_shared<Peer>(this, m.id, target)).first;
      }
      it->second->SetSuspect(m.state == membership::MemberState::kSuspect);
      present.insert(m.id);
      connect.push_back(it->second);
    }
    for (auto it = peers_.begin(); it != peers_.end();) {
      if (present.count(it->first) == 0) {
        gone.push_back(it->second);
        it = peers_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& peer : gone) peer->Shutdown();
  for (auto& peer : connect) peer->Connect(now);
}

void RemoteBackend::Stop() {
  std::map<std::string, std::shared_ptr<Peer>> peers;
  std::vector<std::shared_ptr<RemoteCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    peers.swap(peers_);
    for (auto& [id, call] : calls_) calls.push_back(call);
  }
  for (auto& [id, peer] : peers) peer->Shutdown();
  for (auto& call : calls) call->Cancel();
  calls.clear();
  // Reactors hold the backend's address: wait for gRPC to be done with every one of them.
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    {
      absl::MutexLock lock(&mu_);
      if (calls_.empty() && reactors_open_ == 0) return;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXA_LOG_WARN("gateway", "remote streams still open at shutdown", {});
}

std::vector<ModelView> RemoteBackend::Models() const {
  std::vector<ModelView> out;
  std::set<std::string> seen;
  if (local_ != nullptr) {
    for (ModelView& m : local_->Models()) {
      seen.insert(ModelKey(m.name, m.version));
      out.push_back(std::move(m));
    }
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [key, m] : models_) {
    if (seen.insert(key).second) out.push_back(m);
  }
  return out;
}

void RemoteBackend::OnModels(const std::string& node_id,
                             const exaserve::v1::DescribeModelsResponse& r) {
  for (const auto& d : r.models()) {
    std::string key = ModelKey(d.name(), d.version());
    {
      absl::MutexLock lock(&mu_);
      if (models_.count(key) != 0) continue;
    }
    auto detok = engine::DetokenizerFromJson(d.tokenizer_json(), d.tokenizer_config_json(),
                                             StrCat(node_id, ":", key));
    if (!detok.ok()) {
      EXA_LOG_WARN("gateway", "model tokenizer refused",
                   {{"node", node_id}, {"model", key}, {"error", detok.status().ToString()}});
      continue;
    }
    absl::MutexLock lock(&mu_);
    models_.emplace(key, ModelView{d.name(), d.version(), *std::move(detok), d.max_context()});
  }
}

std::string RemoteBackend::NodeOf(const std::string& replica_id) const {
  absl::MutexLock lock(&routes_mu_);
  auto it = replica_node_.find(replica_id);
  return it == replica_node_.end() ? std::string() : it->second;
}

void RemoteBackend::SetRoute(const std::string& replica_id, const std::string& node_id) {
  absl::MutexLock lock(&routes_mu_);
  replica_node_[replica_id] = node_id;
}

void RemoteBackend::ClearRoute(const std::string& replica_id) {
  absl::MutexLock lock(&routes_mu_);
  replica_node_.erase(replica_id);
}

absl::StatusOr<engine::RequestId> RemoteBackend::Submit(const std::string& replica_id,
                                                        engine::GenerateRequest request) {
  std::string node_id = NodeOf(replica_id);
  if (node_id.empty()) {
    if (local_ != nullptr) return local_->Submit(replica_id, std::move(request));
    return absl::UnavailableError(StrCat("replica ", replica_id, " is gone"));
  }
  std::shared_ptr<Peer> peer;
  engine::RequestId id = next_id_.fetch_add(1);
  std::shared_ptr<RemoteCall> call;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return absl::UnavailableError("gateway is shutting down");
    auto it = peers_.find(node_id);
    if (it == peers_.end()) {
      return absl::UnavailableError(StrCat("replica ", replica_id, ": node ", node_id,
                                           " is not reachable from this gateway"));
    }
    peer = it->second;
    call = std::make_shared<RemoteCall>(this, id, replica_id, node_id, std::move(request.callback));
    calls_.emplace(id, call);
  }
  exaserve::v1::NodeGenerateRequest p;
  p.set_replica_id(replica_id);
  exaserve::v1::GenerateRequest* g = p.mutable_request();
  g->mutable_prompt_tokens()->mutable_ids()->Assign(request.prompt_tokens.begin(),
                                                    request.prompt_tokens.end());
  g->set_max_tokens(request.max_tokens);
  engine::rpc::SamplingToProto(request.sampling, g->mutable_sampling());
  for (const std::string& stop : request.stop_strings) g->add_stop(stop);
  g->mutable_stop_token_ids()->Assign(request.stop_token_ids.begin(), request.stop_token_ids.end());
  g->set_ignore_eos(request.ignore_eos);
  g->set_min_tokens(request.min_tokens);
  g->set_json_schema(request.json_schema);
  g->set_json_prefix(request.json_prefix);
  g->set_json_suffix(request.json_suffix);
  g->set_keep_special_tokens(request.keep_special_tokens);
  for (const std::string& c : request.choices) g->add_choice(c);
  g->set_regex(request.regex);
  g->set_request_id(request.request_id);
  g->set_cache_salt(request.cache_salt);
  if (request.dispatch != 0) {
    p.set_dispatcher(dispatcher_);
    p.set_dispatch(request.dispatch);
  }
  if (request.attempt > 0 || request.resumed_tokens > 0) {
    exaserve::v1::Continuation* c = p.mutable_continuation();
    c->set_resumed_tokens(request.resumed_tokens);
    c->set_resumed_text_bytes(request.resumed_text_bytes);
    c->set_attempt(request.attempt);
  }
  remote_calls_.Increment();
  call->Start(peer->stub(), std::move(p));
  return id;
}

void RemoteBackend::Cancel(const std::string& replica_id, engine::RequestId id) {
  if (NodeOf(replica_id).empty()) {
    if (local_ != nullptr) local_->Cancel(replica_id, id);
    return;
  }
  std::shared_ptr<RemoteCall> call;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return;
    call = it->second;
  }
  call->Cancel();
}

void RemoteBackend::ForgetCall(engine::RequestId id) {
  std::shared_ptr<RemoteCall> call;
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(id);
  if (it == calls_.end()) return;
  call = std::move(it->second);
  calls_.erase(it);
  // `call` is destroyed after the lock is released (it may be the caller itself).
}

int RemoteBackend::watched_nodes() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, peer] : peers_) n += peer->watching() ? 1 : 0;
  return n;
}

}  // namespace exa::gateway
