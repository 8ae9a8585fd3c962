#include "node/node_service.h"

#include <fstream>
#include <sstream>

#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/rpc/generate_stream.h"
#include "engine/structured/json_schema.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer_detokenizer.h"
#include "net/grpc_status.h"

namespace exa::node {

using engine::rpc::GenerateStreamReactor;
using engine::rpc::SamplingFromProto;
using engine::rpc::StreamHandle;
using exaserve::v1::LoadReport;
using net::StatusToGrpc;

// One WatchLoad stream. Publish hands it the newest report; only one write is in flight and a
// report that arrives meanwhile replaces the pending one. The replicas' cached-block deltas are
// added as each report goes out, from this stream's own cursors (prefix_delta.h), so a replaced
// report loses no cache event.
class NodeService::Watcher final : public grpc::ServerWriteReactor<LoadReport> {
 public:
  // `registered`: the service owns it and deletes it after OnDone; else it deletes itself.
  // `min_interval`: the caller's max_rate_hz as a gap between writes (reports offered sooner
  // are held, and the newest goes out at the first offer after the gap).
  // `dispatcher`: the gateway's id from its WatchLoadRequest (0: it gave none).
  explicit Watcher(bool registered, absl::Duration min_interval = absl::ZeroDuration(),
                   uint64_t dispatcher = 0)
      : registered_(registered), min_interval_(min_interval), dispatcher_(dispatcher) {}
  bool done() const { return done_.load(); }

  // `admitted`: read before the report's load (AdmittedDispatches::Snapshot).
  void Offer(const LoadReport& report, std::shared_ptr<const Engines> engines,
             const AdmittedDispatches::Marks& admitted) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    const absl::Time now = absl::Now();
    LoadReport& slot = writing_ || now - last_write_ < min_interval_ ? pending_ : current_;
    slot = report;
    if (dispatcher_ != 0) {
      for (auto& p : *slot.mutable_replicas()) {
        p.set_admitted_dispatch(AdmittedOf(admitted, p.replica_id(), dispatcher_));
      }
    }
    if (&slot == &pending_) {
      pending_engines_ = std::move(engines);
      has_pending_ = true;
      return;
    }
    has_pending_ = false;
    WriteLocked(now, engines.get());
  }
  void End(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }
  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok || finished_) return;
    const absl::Time now = absl::Now();
    if (has_pending_ && now - last_write_ >= min_interval_) {
      current_ = std::move(pending_);
      has_pending_ = false;
      std::shared_ptr<const Engines> engines = std::move(pending_engines_);
      WriteLocked(now, engines.get());
    }
  }
  void OnCancel() override { End(grpc::Status::CANCELLED); }
  void OnDone() override {
    // The service may be offering a report right now; it deletes us on its next pass.
    if (registered_) {
      done_ = true;
    } else {
      delete this;
    }
  }

 private:
  void WriteLocked(absl::Time now, const Engines* engines) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (engines != nullptr) {
      AddCacheDeltas(
          current_,
          [engines](const std::string& id) -> const engine::PrefixJournal* {
            auto it = engines->find(id);
            return it == engines->end() || it->second == nullptr ? nullptr
                                                                 : it->second->prefix_journal();
          },
          cursors_, now);
    }
    writing_ = true;
    last_write_ = now;
    StartWrite(&current_);
  }

  const bool registered_;
  const absl::Duration min_interval_;
  const uint64_t dispatcher_;
  std::atomic<bool> done_{false};
  absl::Mutex mu_;
  absl::Time last_write_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  LoadReport current_ ABSL_GUARDED_BY(mu_);  // the write in flight
  LoadReport pending_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Engines> pending_engines_ ABSL_GUARDED_BY(mu_);
  CacheCursors cursors_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

void ToProto(const PrefixCacheDelta& d, exaserve::v1::PrefixCacheDelta* p) {
  std::string hashes;
  hashes.reserve(d.events.size() * 8);
  for (const CacheEvent& e : d.events) hashes.append(e.hash.ToBytes(), 0, 8);
  p->set_hashes(std::move(hashes));
  if (d.snapshot) {  // the header only here: a delta follows the snapshot of its epoch
    p->set_snapshot(true);
    p->set_epoch(d.epoch);
    p->set_to_seq(d.to);
    p->set_report_every_blocks(static_cast<uint32_t>(d.report.every_blocks));
    p->set_report_max_every_blocks(static_cast<uint32_t>(d.report.max_every_blocks));
    p->set_cache_namespace(d.cache_namespace);
    return;
  }
  p->set_from_seq(d.from);
  std::string bits((d.events.size() + 7) / 8, '\0');
  for (size_t i = 0; i < d.events.size(); ++i) {
    if (!d.events[i].stored) bits[i / 8] = static_cast<char>(bits[i / 8] | (1 << (i % 8)));
  }
  p->set_evicted_bits(std::move(bits));
}

void FillReplicaLoad(const std::string& id, const std::string& model, const std::string& version,
                     bool ready, const engine::EngineLoad& load, exaserve::v1::ReplicaLoad* p) {
  p->set_replica_id(id);
  p->set_pending_tokens(load.pending_tokens);
  p->set_running_sequences(load.running);
  p->set_max_running_sequences(load.max_running);
  p->set_waiting_sequences(load.waiting);
  p->set_blocked_sequences(load.blocked);
  p->set_kv_blocks_used(load.kv_blocks_used);
  p->set_kv_blocks_total(load.kv_blocks_total);
  p->set_ttft_p50_ms(load.ttft_p50_ms);
  p->set_ttft_p99_ms(load.ttft_p99_ms);
  p->set_inter_token_p50_ms(load.itl_p50_ms);
  p->set_inter_token_p99_ms(load.itl_p99_ms);
  p->set_model(model);
  p->set_version(version);
  p->set_ready(ready);
  p->set_kv_blocks_cached(load.kv_blocks_cached);
  p->set_kv_evictions(load.kv_evictions);
  p->set_prefix_hit_tokens(load.prefix_hit_tokens);
  p->set_prefix_miss_tokens(load.prefix_miss_tokens);
}

void AddCacheDeltas(LoadReport& report, const JournalOf& journal_of, CacheCursors& cursors,
                    absl::Time now) {
  size_t budget = kMaxCacheEventsPerReport;
  CacheCursors kept;
  for (int i = 0; i < report.replicas_size(); ++i) {
    auto* p = report.mutable_replicas(i);
    const engine::PrefixJournal* journal = journal_of(p->replica_id());
    if (journal == nullptr) continue;
    CacheCursor cursor = cursors[p->replica_id()];
    // A replica's events wait up to kCacheDeltaInterval to go out together (each delta carries
    // a header), unless there are many; a snapshot (new stream, restart) goes at once.
    const uint64_t last = journal->last_seq();
    const bool due = cursor.epoch != journal->epoch() ||
                     (last > cursor.seq && (last - cursor.seq >= kEagerCacheEvents ||
                                            now - cursor.sent >= kCacheDeltaInterval));
    if (budget > 0 && due) {
      PrefixCacheDelta d =
          journal->Since(cursor.epoch, cursor.seq, std::min(budget, kMaxCacheEventsPerReplica),
                         std::min(budget, kMaxCacheSnapshotPerReplica));
      // A snapshot larger than what is left of this report waits for the next one.
      if (!d.empty() && d.events.size() <= budget) {
        budget -= d.events.size();
        cursor = {d.epoch, d.to, now};
        ToProto(d, p->mutable_cache_delta());
      }
    }
    kept[p->replica_id()] = cursor;  // replicas no longer reported are forgotten
  }
  cursors = std::move(kept);
}

NodeService::NodeService(std::string node_id, ReplicaHost& host,
                         std::function<bool(const std::string&)> routable,
                         std::function<NotRoutable(const std::string&)> why_not,
                         metrics::Registry& registry, net::AdminAuthorizer authorize)
    : node_id_(std::move(node_id)),
      host_(host),
      routable_(std::move(routable)),
      why_not_(std::move(why_not)),
      authorize_(authorize ? std::move(authorize)
                           : [](const grpc::ServerContextBase&,
                                std::string_view) { return grpc::Status::OK; }),
      generate_requests_(
          registry.SimpleCounter("exaserve_node_generate_requests_total",
                                 "Node.Generate calls (the gateway → replica hop).")),
      watch_refused_(registry.SimpleCounter(
          "exaserve_node_load_watchers_refused_total",
          "WatchLoad streams refused because the node already serves the maximum.")) {
  registry.AddGaugeCallback("exaserve_node_load_watchers", "Open WatchLoad streams.",
                            [this] { return static_cast<double>(watchers()); });
  registry.AddGaugeCallback(
      "exaserve_node_scheduler_term",
      "The highest scheduler Raft term that commanded this node; commands from a lower term are "
      "refused (docs/architecture.md#consistency).",
      [this] { return static_cast<double>(fence_.highest()); });
}

// The gRPC server is shut down first (every stream done), so no watcher is still in use.
NodeService::~NodeService() {
  absl::MutexLock lock(&mu_);
  for (Watcher* w : watchers_) delete w;
  watchers_.clear();
}

namespace {

// A gateway's request as the engine takes it (its callback left to the caller).
absl::StatusOr<engine::GenerateRequest> EngineRequest(
    const exaserve::v1::NodeGenerateRequest& request) {
  const exaserve::v1::GenerateRequest& p = request.request();
  engine::GenerateRequest g;
  g.prompt_tokens.assign(p.prompt_tokens().ids().begin(), p.prompt_tokens().ids().end());
  g.max_tokens = p.max_tokens();
  g.sampling = SamplingFromProto(p.sampling());
  g.stop_strings.assign(p.stop().begin(), p.stop().end());
  g.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  g.ignore_eos = p.ignore_eos();
  g.min_tokens = p.min_tokens();
  g.keep_special_tokens = p.keep_special_tokens();
  if (!p.json_schema().empty()) {
    auto grammar =
        engine::structured::CompileJsonSchema(p.json_schema(), p.json_prefix(), p.json_suffix());
    if (!grammar.ok()) {
      return absl::InvalidArgumentError(
          StrCat("request.json_schema: ", ToStd(grammar.status().message())));
    }
    g.grammar = *std::move(grammar);
    g.json_schema = p.json_schema();
    g.json_prefix = p.json_prefix();
    g.json_suffix = p.json_suffix();
  } else if (p.choice_size() > 0) {
    g.choices.assign(p.choice().begin(), p.choice().end());
    auto grammar = engine::structured::CompileChoice(g.choices);
    if (!grammar.ok()) {
      return absl::InvalidArgumentError(
          StrCat("request.choice: ", ToStd(grammar.status().message())));
    }
    g.grammar = *std::move(grammar);
  } else if (!p.regex().empty()) {
    g.regex = p.regex();
    auto grammar = engine::structured::CompileRegexGrammar(g.regex);
    if (!grammar.ok()) {
      return absl::InvalidArgumentError(
          StrCat("request.regex: ", ToStd(grammar.status().message())));
    }
    g.grammar = *std::move(grammar);
  }
  g.request_id = p.request_id();
  g.cache_salt = p.cache_salt();
  // A continuation; the engine checks its numbers against the prompt (engine/request.h).
  g.resumed_tokens = request.continuation().resumed_tokens();
  g.resumed_text_bytes = request.continuation().resumed_text_bytes();
  g.attempt = request.continuation().attempt();
  return g;
}

}  // namespace

grpc::ServerWriteReactor<exaserve::v1::GenerateResponse>* NodeService::Generate(
    grpc::CallbackServerContext* context, const exaserve::v1::NodeGenerateRequest* request) {
  generate_requests_.Increment();
  auto* reactor = new GenerateStreamReactor(request->request().sampling().logprobs(),
                                            request->request().sampling().top_logprobs());
  reactor->Begin([&](engine::StreamCallback sink) -> absl::StatusOr<StreamHandle> {
    const std::string& replica_id = request->replica_id();
    std::shared_ptr<engine::Engine> engine = host_.FindEngine(replica_id);
    if (engine == nullptr) {
      return absl::NotFoundError(
          StrCat("replica_id: \"", replica_id, "\" is not on node ", node_id_));
    }
    if (!routable_(replica_id)) {
      return absl::UnavailableError(StrCat("replica ", replica_id, " is not ready"));
    }
    const exaserve::v1::GenerateRequest& p = request->request();
    if (!p.has_prompt_tokens() || p.prompt_tokens().ids().empty()) {
      return absl::InvalidArgumentError("request.prompt_tokens: the gateway must send token ids");
    }
    EXA_ASSIGN_OR_RETURN(engine::GenerateRequest g, EngineRequest(*request));
    EXA_LOG_DEBUG("node", "request started",
                  {{"request_id", g.request_id},
                   {"attempt", g.attempt},
                   {"resumed_tokens", g.resumed_tokens},
                   {"replica", replica_id},
                   {"prompt_tokens", g.prompt_tokens.size()},
                   {"max_tokens", g.max_tokens}});
    // The same request id as the gateway's line: one request followed across nodes.
    g.callback = [sink = std::move(sink), rid = g.request_id, attempt = g.attempt, replica_id,
                  started = absl::Now()](const engine::StreamEvent& e) {
      if (e.finished) {
        const int64_t ms = absl::ToInt64Milliseconds(absl::Now() - started);
        if (e.status.ok()) {
          EXA_LOG_DEBUG("node", "request finished",
                        {{"request_id", rid},
                         {"attempt", attempt},
                         {"replica", replica_id},
                         {"completion_tokens", e.completion_tokens},
                         {"ms", ms}});
        } else {
          EXA_LOG_WARN("node", "request failed",
                       {{"request_id", rid},
                        {"attempt", attempt},
                        {"replica", replica_id},
                        {"completion_tokens", e.completion_tokens},
                        {"ms", ms},
                        {"error", ToStd(e.status.message())}});
        }
      }
      sink(e);
    };
    EXA_ASSIGN_OR_RETURN(engine::RequestId id, engine->Submit(std::move(g)));
    admitted_.Note(replica_id, request->dispatcher(), request->dispatch());  // now it counts
    StreamHandle handle;
    handle.cancel = [engine, id] { engine->Cancel(id); };
    handle.request_id = [rid = p.request_id()] { return rid; };
    handle.replica_id = [replica_id] { return replica_id; };
    return handle;
  });
  return reactor;
}

grpc::ServerWriteReactor<LoadReport>* NodeService::WatchLoad(
    grpc::CallbackServerContext* context, const exaserve::v1::WatchLoadRequest* request) {
  // max_rate_hz: 0 is the node's own rate (10 Hz, and up to 50 Hz while slots change); a lower
  // rate spaces the writes.
  const double hz = request->max_rate_hz();
  if (!(hz == 0 || (hz >= 0.1 && hz <= 1e9))) {
    auto* refused = new Watcher(/*registered=*/false);
    refused->End(grpc::Status(
        grpc::INVALID_ARGUMENT,
        StrCat("max_rate_hz: ", hz, ": 0 (the node's rate, 10 to 50 Hz) or at least 0.1")));
    return refused;
  }
  const absl::Duration min_interval =
      hz == 0 || hz >= 50 ? absl::ZeroDuration() : absl::Seconds(1.0 / hz);
  absl::MutexLock lock(&mu_);
  ReapLocked();
  if (stopped_ || watchers_.size() >= kMaxWatchers) {
    auto* refused = new Watcher(/*registered=*/false);
    if (stopped_) {
      refused->End(grpc::Status(grpc::UNAVAILABLE, "node is shutting down"));
    } else {
      watch_refused_.Increment();
      refused->End(grpc::Status(grpc::RESOURCE_EXHAUSTED,
                                StrCat("node serves at most ", kMaxWatchers, " load watchers")));
    }
    return refused;
  }
  auto* watcher = new Watcher(/*registered=*/true, min_interval, request->dispatcher());
  watchers_.push_back(watcher);
  // A new gateway learns the replicas at once.
  std::shared_ptr<const AdmittedDispatches::Marks> admitted = AdmittedLocked();
  watcher->Offer(SnapshotLocked(), EnginesNow(), *admitted);
  return watcher;
}

grpc::ServerUnaryReactor* NodeService::DescribeModels(
    grpc::CallbackServerContext* context, const exaserve::v1::DescribeModelsRequest*,
    exaserve::v1::DescribeModelsResponse* response) {
  auto* reactor = context->DefaultReactor();
  auto described = node::DescribeModels(node_id_, host_);
  if (!described.ok()) {
    reactor->Finish(net::StatusToGrpc(described.status()));
    return reactor;
  }
  *response = *std::move(described);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void NodeService::FillStatus(const ReplicaView& v, exaserve::v1::ReplicaStatus* p) const {
  p->set_replica_id(v.id);
  p->set_model(v.model);
  p->set_version(v.version);
  p->set_backend(v.backend);
  p->set_device(v.device);
  p->set_generation(v.generation);
  p->set_memory_budget_bytes(v.budget_bytes);
  p->set_state_since_unix_ms(absl::ToUnixMillis(v.since));
  p->set_state(v.state);
  p->set_reason(v.reason);
  if (v.state == "ready" && !routable_(v.id)) {
    NotRoutable why = why_not_(v.id);
    p->set_state(why.state);
    p->set_reason(why.reason);
  }
  for (const auto& [k, val] : host_.LabelsOf(v.id)) (*p->mutable_labels())[k] = val;
  if (v.engine) {
    engine::EngineInfo info = v.engine->info();
    p->set_weight_bytes(info.weight_bytes);
    engine::EngineLoad load = v.engine->Load();
    p->set_running_sequences(load.running);
    p->set_waiting_sequences(load.waiting);
    p->set_pending_tokens(load.pending_tokens);
    p->set_kv_blocks_used(load.kv_blocks_used);
    p->set_kv_blocks_total(load.kv_blocks_total);
    p->set_ttft_p99_ms(load.ttft_p99_ms);
    p->set_inter_token_p99_ms(load.itl_p99_ms);
    p->set_queue_time_p90_ms(load.queue_p90_ms);
    p->set_recent_finished(load.recent_finished);
    p->set_error_rate(load.error_rate);
    p->set_memory_bytes(load.memory_bytes);
  }
}

grpc::ServerUnaryReactor* NodeService::StartReplica(grpc::CallbackServerContext* context,
                                                    const exaserve::v1::StartReplicaRequest* req,
                                                    exaserve::v1::ReplicaStatus* response) {
  auto* reactor = context->DefaultReactor();
  if (grpc::Status s = authorize_(*context, "Node.StartReplica"); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  if (absl::Status s = fence_.Admit(req->scheduler_term(), "Node.StartReplica"); !s.ok()) {
    reactor->Finish(net::StatusToGrpc(s));
    return reactor;
  }
  ReplicaSpec spec;
  spec.model_dir = req->model_dir();
  spec.model = req->model();
  if (!req->version().empty()) spec.version = req->version();
  spec.replica_id = req->replica_id();
  spec.generation = req->generation();
  spec.backend = req->backend();
  spec.device = req->has_device() ? req->device() : -1;
  spec.kv_cache_bytes = req->kv_cache_bytes();
  spec.memory_budget_bytes = req->memory_budget_bytes();
  spec.labels.insert(req->labels().begin(), req->labels().end());
  absl::StatusOr<ReplicaView> view = host_.StartReplica(spec);
  if (!view.ok()) {
    reactor->Finish(net::StatusToGrpc(view.status()));
    return reactor;
  }
  FillStatus(*view, response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* NodeService::StopReplica(grpc::CallbackServerContext* context,
                                                   const exaserve::v1::StopReplicaRequest* req,
                                                   exaserve::v1::ReplicaStatus* response) {
  auto* reactor = context->DefaultReactor();
  if (grpc::Status s = authorize_(*context, "Node.StopReplica"); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  if (absl::Status s = fence_.Admit(req->scheduler_term(), "Node.StopReplica"); !s.ok()) {
    reactor->Finish(net::StatusToGrpc(s));
    return reactor;
  }
  // Written so that NaN fails too.
  if (!(req->drain_timeout_seconds() >= 0 && req->drain_timeout_seconds() <= 24 * 3600)) {
    reactor->Finish(grpc::Status(grpc::INVALID_ARGUMENT,
                                 StrCat("drain_timeout_seconds: ", req->drain_timeout_seconds(),
                                        ": must be in [0, 86400]")));
    return reactor;
  }
  absl::StatusOr<ReplicaView> view = host_.StopReplica(req->replica_id(), !req->immediate(),
                                                       absl::Seconds(req->drain_timeout_seconds()));
  if (!view.ok()) {
    reactor->Finish(net::StatusToGrpc(view.status()));
    return reactor;
  }
  FillStatus(*view, response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* NodeService::StageModel(grpc::CallbackServerContext* context,
                                                  const exaserve::v1::StageModelRequest* req,
                                                  exaserve::v1::StageModelResponse* response) {
  auto* reactor = context->DefaultReactor();
  if (grpc::Status s = authorize_(*context, "Node.StageModel"); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  if (absl::Status s = fence_.Admit(req->scheduler_term(), "Node.StageModel"); !s.ok()) {
    reactor->Finish(net::StatusToGrpc(s));
    return reactor;
  }
  auto staged = host_.StageModel(req->model(), req->version());
  if (!staged.ok()) {
    reactor->Finish(net::StatusToGrpc(staged.status()));
    return reactor;
  }
  response->set_state(staged->first);
  response->set_reason(staged->second);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* NodeService::ListReplicas(grpc::CallbackServerContext* context,
                                                    const exaserve::v1::ListReplicasRequest*,
                                                    exaserve::v1::ListReplicasResponse* response) {
  response->set_node_id(node_id_);
  response->set_boot_id(boot_id_.load());
  response->set_pulls_models(host_.pulls_models());
  for (std::string& m : host_.StagedModels()) response->add_staged_models(std::move(m));
  for (const ReplicaView& v : host_.Views()) FillStatus(v, response->add_replicas());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

LoadReport NodeService::Snapshot() {
  absl::MutexLock lock(&mu_);
  return SnapshotLocked();
}

LoadReport NodeService::SnapshotLocked() {
  LoadReport report;
  report.set_node_id(node_id_);
  report.set_sequence(++sequence_);
  for (const auto& r : host_.replicas()) {
    auto* p = report.add_replicas();
    FillReplicaLoad(r->id, r->model->name, r->model->version, routable_(r->id), r->engine->Load(),
                    p);
    for (const auto& [k, v] : host_.LabelsOf(r->id)) (*p->mutable_labels())[k] = v;
  }
  return report;
}

std::shared_ptr<const Engines> NodeService::EnginesNow() const {
  auto engines = std::make_shared<Engines>();
  for (const auto& r : host_.replicas()) (*engines)[r->id] = r->engine;
  return engines;
}

void NodeService::Publish() {
  absl::MutexLock lock(&mu_);
  ReapLocked();
  if (watchers_.empty()) return;
  OfferLocked(absl::Now());
}

void NodeService::PublishIfDue(absl::Time now) {
  absl::MutexLock lock(&mu_);
  ReapLocked();
  if (watchers_.empty()) return;
  // A tick early (the timer's jitter) still counts as the period.
  const bool stale = now - published_at_ >= report_period_ - absl::Milliseconds(5);
  if (!stale && SlotStateLocked() == published_state_) return;
  OfferLocked(now);
}

std::shared_ptr<const AdmittedDispatches::Marks> NodeService::AdmittedLocked() {
  std::vector<std::string> ids;
  for (const auto& r : host_.replicas()) ids.push_back(r->id);
  return admitted_.Snapshot(ids);
}

void NodeService::OfferLocked(absl::Time now) {
  // The marks before the load, so a dispatch they name is in the load (admitted_dispatches.h).
  std::shared_ptr<const AdmittedDispatches::Marks> admitted = AdmittedLocked();
  LoadReport report = SnapshotLocked();
  published_at_ = now;
  // Read from the report itself, so a change between two reads is not taken as sent.
  published_state_.clear();
  for (const auto& p : report.replicas()) {
    published_state_.push_back({p.replica_id(),
                                int64_t{p.running_sequences()} + p.waiting_sequences(),
                                p.blocked_sequences(), p.ready()});
  }
  std::shared_ptr<const Engines> engines = EnginesNow();
  for (Watcher* w : watchers_) w->Offer(report, engines, *admitted);
}

std::vector<NodeService::SlotState> NodeService::SlotStateLocked() const {
  std::vector<SlotState> state;
  for (const auto& r : host_.replicas()) {
    const engine::EngineLoad load = r->engine->Load();
    state.push_back({r->id, int64_t{load.running} + load.waiting, load.blocked, routable_(r->id)});
  }
  return state;
}

void NodeService::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  for (Watcher* w : watchers_) w->End(grpc::Status(grpc::UNAVAILABLE, "node is shutting down"));
}

size_t NodeService::watchers() {
  absl::MutexLock lock(&mu_);
  ReapLocked();
  return watchers_.size();
}

void NodeService::ReapLocked() {
  std::erase_if(watchers_, [](Watcher* w) {
    if (!w->done()) return false;
    delete w;
    return true;
  });
}

absl::StatusOr<exaserve::v1::DescribeModelsResponse> DescribeModels(const std::string& node_id,
                                                                    const ReplicaHost& host) {
  exaserve::v1::DescribeModelsResponse response;
  response.set_node_id(node_id);
  for (const ServedModel* m : host.models()) {
    std::string path = m->dir + "/tokenizer.json";
    absl::StatusOr<std::string> text = ReadFile(path, engine::Tokenizer::kMaxFileBytes);
    if (!text.ok()) return absl::InternalError(text.status().message());
    auto* d = response.add_models();
    d->set_name(m->name);
    d->set_version(m->version);
    d->set_max_context(m->info.max_context);
    d->set_tokenizer_json(*std::move(text));
    // The chat template the replica loaded (and so parsed); gateways render chat prompts with it.
    auto config = engine::ReadTokenizerConfig(m->dir);
    if (!config.ok()) return absl::InternalError(config.status().message());
    d->set_tokenizer_config_json(*std::move(config));
  }
  return response;
}

}  // namespace exa::node
