// `exaserve-bench route --mode sim`: a discrete-event simulation of G gateways routing a Poisson
// stream over M sim replicas, through the real router and engine code in virtual time.
//
// Events, in time order (ties in the order they were queued):
//   arrival  a client request reaches a random gateway; its ReplicaTable picks a replica (the
//            policy under test) and the request is submitted to that SimReplica;
//   step     a replica with work runs one engine step (SimReplica::RunUntil); its tokens are
//            stamped at the step's end;
//   finish   a request's last token: the dispatching gateway's table learns it (Complete);
//   report   a node's load report (every replica on it) reaches every gateway, report_hz times a
//            second, each node at its own phase, and sooner when a replica's sequences or blocked
//            count changed, at most report_change_hz times a second (as NodeService publishes);
//            what was dispatched since is forgotten, as in ReplicaTable::Report;
//   cache    a node's cached-block deltas (engine/prefix_journal.h) reach the gateways' prefix
//            index, cache_report_hz times a second (the node batches them). The gateways share
//            one index: they would all receive the same deltas at the same instants.
// The oracle is kv-token-aware on instant global state: before each pick the gateway gets every
// replica's load as of now, with pending tokens from the true remaining output lengths, and an
// index read up to now.
// A report reflects each replica's state after the step it is in (at most one step, ~20-45 ms,
// ahead of the report's time); the real WatchLoad stream reads the engine's last published load,
// which is up to one step behind. Both are within the 100 ms report period.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <unordered_map>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "bench/lru_blocks.h"
#include "bench/route_bench.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/prefix_hash.h"
#include "engine/prefix_journal.h"
#include "engine/sim_replica.h"
#include "router/prefix_index.h"
#include "router/replica_table.h"

namespace exa::bench {
namespace {

const absl::Time kEpoch = absl::FromUnixSeconds(1'000'000);
constexpr char kModel[] = "sim-13b";

enum class Kind { kStep, kFinish, kReport, kCache, kArrival };

struct Event {
  absl::Time time;
  uint64_t order = 0;
  Kind kind = Kind::kArrival;
  int64_t index = 0;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : order > o.order; }
};

struct Request {
  absl::Time arrival;
  std::optional<absl::Time> first_token;
  int32_t gateway = 0;
  int32_t replica = -1;
  bool measured = false;
  int32_t true_output = 0;  // the oracle's knowledge
  int32_t emitted = 0;
  int64_t uncached_prompt = 0;
  uint64_t dispatch = 0;  // its gateway table's number for it
};

class Simulation {
 public:
  Simulation(const RouteSimOptions& o, const engine::EngineOptions& engine, router::Policy policy,
             bool oracle, double rate, uint64_t seed, const traces::Trace* trace)
      : o_(o),
        engine_(engine),
        rate_(rate),
        oracle_(oracle),
        workload_(o.workload, seed, trace),
        random_(seed ^ 0xA5A5) {
    for (int32_t g = 0; g < o.gateways; ++g) {
      tables_.push_back(std::make_unique<router::ReplicaTable>(policy, seed * 131 + g));
      tables_.back()->SetPrefixIndex(&prefix_index_);
    }
    root_ = hasher_.Root(engine_.prefix_cache_namespace, "");
  }

  absl::Status Init() {
    for (int32_t r = 0; r < o_.replicas; ++r) {
      EXA_ASSIGN_OR_RETURN(auto replica, engine::SimReplica::Create(engine_, kEpoch));
      replicas_.push_back(std::move(replica));
      journals_.push_back(std::make_unique<engine::PrefixJournal>(static_cast<uint64_t>(r + 1),
                                                                  engine_.prefix_cache.report,
                                                                  engine_.prefix_cache_namespace));
      cursors_.push_back({});
      open_on_.emplace_back();
      ids_.push_back(
          StrCat("node-", r / o_.replicas_per_node, "/", kModel, "@v1#", r % o_.replicas_per_node));
      index_[ids_.back()] = r;
      for (auto& t : tables_) t->Upsert({ids_.back(), kModel, "v1", {}});
    }
    pooled_.emplace(int64_t{replicas_.front()->Load().kv_blocks_total} * o_.replicas);
    scheduled_.assign(replicas_.size(), absl::InfiniteFuture());
    const int32_t nodes = (o_.replicas + o_.replicas_per_node - 1) / o_.replicas_per_node;
    const absl::Duration period = ReportCheckPeriod();
    const absl::Duration cache_period = absl::Seconds(1.0 / o_.cache_report_hz);
    reported_.resize(static_cast<size_t>(nodes));
    for (int32_t n = 0; n < nodes; ++n) {
      Report(n, kEpoch);  // every replica known and ready from the start
      Push(kEpoch + period * random_.UniformDouble(), Kind::kReport, n);
      Push(kEpoch + cache_period * random_.UniformDouble(), Kind::kCache, n);
    }
    Push(kEpoch, Kind::kArrival, 0);
    return absl::OkStatus();
  }

  RunStats Run(int64_t warmup, int64_t measured) {
    total_ = warmup + measured;
    warmup_ = warmup;
    requests_.resize(static_cast<size_t>(total_));
    const absl::Duration period = ReportCheckPeriod();
    while (!events_.empty() && (issued_ < total_ || open_ > 0)) {
      Event e = events_.top();
      events_.pop();
      now_ = e.time;
      switch (e.kind) {
        case Kind::kArrival:
          Arrive();
          break;
        case Kind::kStep:
          Step(static_cast<int32_t>(e.index), e.time);
          break;
        case Kind::kFinish:
          tables_[requests_[e.index].gateway]->Complete(ids_[requests_[e.index].replica],
                                                        requests_[e.index].dispatch);
          break;
        case Kind::kReport:
          MaybeReport(static_cast<int32_t>(e.index), e.time);
          Push(e.time + period, Kind::kReport, e.index);
          break;
        case Kind::kCache:
          ReportCache(static_cast<int32_t>(e.index));
          Push(e.time + absl::Seconds(1.0 / o_.cache_report_hz), Kind::kCache, e.index);
          break;
      }
    }
    stats_.window_s = absl::ToDoubleSeconds(last_measured_ - first_measured_);
    const double run_s = absl::ToDoubleSeconds(now_ - kEpoch);
    if (run_s > 0) {
      stats_.load_reports_per_node_s =
          static_cast<double>(stats_.load_reports) / static_cast<double>(reported_.size()) / run_s;
    }
    for (const auto& r : replicas_) {
      stats_.prefix_hit_tokens += r->Load().prefix_hit_tokens;
      stats_.prefix_miss_tokens += r->Load().prefix_miss_tokens;
    }
    if (unbounded_total_ > 0) {
      stats_.unbounded_hit_ratio =
          static_cast<double>(unbounded_hit_) / static_cast<double>(unbounded_total_);
      stats_.pooled_lru_hit_ratio =
          static_cast<double>(pooled_hit_) / static_cast<double>(unbounded_total_);
    }
    return std::move(stats_);
  }

 private:
  void Push(absl::Time t, Kind kind, int64_t index) {
    events_.push(Event{t, next_order_++, kind, index});
  }

  void Schedule(int32_t r) {
    const absl::Time next = replicas_[r]->NextStepTime();
    if (next == absl::InfiniteFuture() || next == scheduled_[r]) return;
    scheduled_[r] = next;
    Push(next, Kind::kStep, r);
  }

  void Step(int32_t r, absl::Time t) {
    if (scheduled_[r] != t) return;  // superseded
    scheduled_[r] = absl::InfiniteFuture();
    replicas_[r]->RunUntil(t);
    replicas_[r]->PublishCacheEvents(*journals_[r]);
    Schedule(r);
  }

  router::LoadReport ReportOf(int32_t r) const {
    const engine::EngineLoad load = replicas_[r]->Load();
    router::LoadReport report{load.pending_tokens, load.running + load.waiting, true, load.blocked};
    report.slots = engine_.max_running;
    if (oracle_) {  // the true remaining work, not the replica's estimate
      report.pending_tokens = 0;
      for (int64_t i : open_on_[r]) {
        const Request& q = requests_[i];
        report.pending_tokens +=
            (q.first_token ? 0 : q.uncached_prompt) + std::max(0, q.true_output - q.emitted);
      }
    }
    return report;
  }

  // How often a node looks whether to report: its change rate when on, else its report rate.
  absl::Duration ReportCheckPeriod() const {
    return absl::Seconds(1.0 / (o_.report_change_hz > 0 ? o_.report_change_hz : o_.report_hz));
  }

  // Each replica's sequences and blocked count on `node`: what a change is judged by.
  std::vector<int64_t> SlotState(int32_t node) const {
    std::vector<int64_t> state;
    const int32_t begin = node * o_.replicas_per_node;
    const int32_t end = std::min(o_.replicas, begin + o_.replicas_per_node);
    for (int32_t r = begin; r < end; ++r) {
      const engine::EngineLoad load = replicas_[r]->Load();
      state.push_back(load.running + load.waiting);
      state.push_back(load.blocked);
    }
    return state;
  }

  // The node reports when its last report is a report period old or, with report_change_hz,
  // when a replica's slot state changed since (NodeService::PublishIfDue).
  void MaybeReport(int32_t node, absl::Time now) {
    if (o_.report_change_hz <= 0) return Report(node, now);
    const NodeReported& last = reported_[static_cast<size_t>(node)];
    const bool due = now - last.at >= absl::Seconds(1.0 / o_.report_hz) - absl::Microseconds(1);
    if (!due && SlotState(node) == last.state) return;
    Report(node, now);
  }

  void Report(int32_t node, absl::Time now) {
    const int32_t begin = node * o_.replicas_per_node;
    const int32_t end = std::min(o_.replicas, begin + o_.replicas_per_node);
    for (int32_t r = begin; r < end; ++r) {
      const router::LoadReport report = ReportOf(r);
      for (auto& t : tables_) t->Report(ids_[r], report);
    }
    reported_[static_cast<size_t>(node)] = {now, SlotState(node)};
    stats_.load_reports++;
  }

  // The replica's cached-block deltas since the index's cursor (node_service.h's bounds).
  void ReportCacheOf(int32_t r) {
    const engine::PrefixJournal& j = *journals_[r];
    while (true) {
      // Epoch 0 at first: the journal answers with a snapshot, as to a new stream.
      PrefixCacheDelta d = j.Since(cursors_[r].epoch, cursors_[r].seq, 4096);
      if (d.empty()) return;
      cursors_[r] = {d.epoch, d.to};
      prefix_index_.Apply(ids_[r], d);
      if (d.to >= j.last_seq()) return;
    }
  }

  void ReportCache(int32_t node) {
    if (oracle_) return;  // the oracle reads the journals at every pick
    const int32_t begin = node * o_.replicas_per_node;
    const int32_t end = std::min(o_.replicas, begin + o_.replicas_per_node);
    for (int32_t r = begin; r < end; ++r) ReportCacheOf(r);
  }

  // The references: one cache that holds every block ever computed, and one least-recently-used
  // cache as large as all the replicas' KV together.
  void CountReferences(const std::vector<Hash128>& hashes, int32_t prompt_tokens) {
    size_t hit = 0;
    while (hit < hashes.size() && unbounded_.contains(hashes[hit])) ++hit;
    for (const Hash128& h : hashes) unbounded_.insert(h);
    unbounded_hit_ += static_cast<int64_t>(hit) * engine_.kv_block_size;
    pooled_hit_ += static_cast<int64_t>(pooled_->Touch(hashes)) * engine_.kv_block_size;
    unbounded_total_ += prompt_tokens;
  }

  // Routes one prompt through `table` as a gateway would, timing the decision: the hashing it
  // asks for included — as deep as Choose asks, like frontend.cc's PromptChains — and the
  // oracle's refresh not.
  absl::StatusOr<router::ReplicaTable::Choice> Route(router::ReplicaTable& table,
                                                     const std::vector<int32_t>& prompt,
                                                     int64_t prompt_tokens, bool measured) {
    router::RouteRequest route{kModel, "", prompt_tokens, {}};
    std::vector<Hash128> asked;
    route.block_hashes = [&](const std::string& ns, size_t blocks) {
      if (ns != engine_.prefix_cache_namespace) return std::span<const Hash128>();
      const size_t n = std::min(blocks, prompt.size() / static_cast<size_t>(engine_.kv_block_size));
      if (asked.size() < n) {
        hasher_.Extend(root_, prompt, engine_.kv_block_size, static_cast<int32_t>(n), &asked);
      }
      return std::span<const Hash128>(asked);
    };
    route.block_tokens = engine_.kv_block_size;
    const auto start = std::chrono::steady_clock::now();
    auto chosen = table.ChooseFor(route);
    if (measured) {
      stats_.choose_us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    }
    return chosen;
  }

  void Arrive() {
    const int64_t i = issued_++;
    Request& req = requests_[i];
    req.arrival = now_;
    req.measured = i >= warmup_;
    if (req.measured) {
      if (i == warmup_) first_measured_ = now_;
      last_measured_ = now_;
    }
    if (issued_ < total_) Push(now_ + absl::Seconds(workload_.NextGap(rate_)), Kind::kArrival, 0);
    const WorkItem item = workload_.Next();
    req.true_output = item.output_tokens;
    req.gateway = static_cast<int32_t>(random_.Uniform(tables_.size()));
    router::ReplicaTable& table = *tables_[req.gateway];
    std::vector<int32_t> prompt = Workload::PromptTokens(item, engine_.sim.vocab_size);
    // The prompt's full blocks named as the replicas' caches do: the sim's own bookkeeping
    // (the unbounded cache, what the chosen replica holds), timed to show what hashing every
    // block would cost a gateway.
    std::vector<Hash128> hashes;
    const auto hash_start = std::chrono::steady_clock::now();
    hasher_.Extend(root_, prompt, engine_.kv_block_size,
                   static_cast<int32_t>(prompt.size()) / engine_.kv_block_size, &hashes);
    const double hash_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - hash_start)
            .count();
    if (req.measured) CountReferences(hashes, item.prompt_tokens);
    if (oracle_) {
      for (int32_t r = 0; r < o_.replicas; ++r) {
        ReportCacheOf(r);
        table.Report(ids_[r], ReportOf(r));
      }
    }
    auto chosen = Route(table, prompt, item.prompt_tokens, req.measured);
    if (req.measured) stats_.hash_us.push_back(hash_us);
    if (!chosen.ok()) {
      if (req.measured) stats_.rejected++;
      return;
    }
    req.replica = index_.at(chosen->replica);
    req.dispatch = chosen->dispatch;
    req.uncached_prompt =
        item.prompt_tokens -
        int64_t{prefix_index_.MatchedBlocks(chosen->replica, hashes)} * engine_.kv_block_size;
    engine::GenerateRequest g;
    g.prompt_tokens = std::move(prompt);
    g.max_tokens = item.max_tokens;
    g.callback = [this, i](const engine::StreamEvent& e) { OnEvent(i, e); };
    auto id = replicas_[req.replica]->Submit(std::move(g), now_);
    if (!id.ok()) {
      table.Complete(chosen->replica, chosen->dispatch);
      if (req.measured) stats_.rejected++;
      return;
    }
    open_++;
    open_on_[req.replica].insert(i);
    Schedule(req.replica);
  }

  void OnEvent(int64_t i, const engine::StreamEvent& e) {
    Request& req = requests_[i];
    if (e.token >= 0 && !req.first_token) req.first_token = e.time;
    if (e.token >= 0) req.emitted++;
    if (!e.finished) return;
    open_--;
    open_on_[req.replica].erase(i);
    Push(e.time, Kind::kFinish, i);
    if (!req.measured) return;
    if (!e.status.ok() || !req.first_token) {
      stats_.failed++;
      return;
    }
    stats_.completed++;
    stats_.output_tokens += e.completion_tokens;
    stats_.ttft_ms.push_back(absl::ToDoubleMilliseconds(*req.first_token - req.arrival));
    stats_.e2e_ms.push_back(absl::ToDoubleMilliseconds(e.time - req.arrival));
  }

  const RouteSimOptions& o_;
  const engine::EngineOptions engine_;
  const double rate_;
  const bool oracle_;
  Workload workload_;
  Random random_;
  engine::PrefixHasher hasher_;
  Hash128 root_;
  router::PrefixIndex prefix_index_;
  std::vector<std::unique_ptr<router::ReplicaTable>> tables_;
  std::vector<std::unique_ptr<engine::SimReplica>> replicas_;
  std::vector<std::unique_ptr<engine::PrefixJournal>> journals_;
  struct Cursor {
    uint64_t epoch = 0, seq = 0;
  };
  std::vector<Cursor> cursors_;                        // the index's place in each journal
  std::vector<absl::flat_hash_set<int64_t>> open_on_;  // open requests per replica
  absl::flat_hash_set<Hash128> unbounded_;
  std::optional<LruBlocks> pooled_;  // made in Init, once the replicas' KV is known
  int64_t unbounded_hit_ = 0, pooled_hit_ = 0, unbounded_total_ = 0;
  std::vector<std::string> ids_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<absl::Time> scheduled_;
  struct NodeReported {
    absl::Time at;
    std::vector<int64_t> state;  // SlotState at that report
  };
  std::vector<NodeReported> reported_;  // by node
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t next_order_ = 0;
  absl::Time now_ = kEpoch;
  std::vector<Request> requests_;
  int64_t total_ = 0, warmup_ = 0, issued_ = 0, open_ = 0;
  absl::Time first_measured_ = kEpoch, last_measured_ = kEpoch;
  RunStats stats_;
};

}  // namespace

engine::EngineOptions BenchEngineOptions() {
  engine::EngineOptions o;
  o.backend = "sim";
  // An A100-80GB holds 26 GB of 13B FP16 weights; at 90 % utilisation ~40 GiB stays for KV
  // (~52k tokens at 0.8 MB each).
  o.kv_cache_bytes = int64_t{40} << 30;
  o.max_batch_tokens = 512;
  o.max_running = 64;
  o.max_queue = 256;
  return o;
}

nlohmann::json DescribeEngine(const engine::EngineOptions& o) {
  return {{"backend", o.backend},
          {"cost_model", "13B FP16 on A100-80GB (engine/sim_cost_model.h)"},
          {"decode_base_ms", o.sim.decode_base_ms},
          {"decode_per_sequence_ms", o.sim.decode_per_sequence_ms},
          {"decode_per_context_token_us", o.sim.decode_per_context_token_us},
          {"prefill_per_token_us", o.sim.prefill_per_token_us},
          {"max_context", o.sim.max_context},
          {"kv_cache_bytes", o.kv_cache_bytes},
          {"max_batch_tokens", o.max_batch_tokens},
          {"max_running", o.max_running},
          {"max_queue", o.max_queue}};
}

absl::StatusOr<engine::EngineOptions> RouteProfile(const std::string& name) {
  engine::EngineOptions o = BenchEngineOptions();
  // 13B FP16 holds 0.8 MB of KV per token (engine/sim_cost_model.h).
  const int64_t per_token = o.sim.kv_bytes_per_token;
  if (name == "13b-a100-64") return o;
  if (name == "13b-a100") {
    // The source document's sizing: 4 running sequences, 4096 context, ~34 000 tokens of KV.
    o.max_running = 4;
    o.kv_cache_bytes = int64_t{34000} * per_token;
    return o;
  }
  if (name == "long-context") {
    // Room for the Mooncake prompts (p99 85 k tokens): 128 k context and 256 k tokens of KV
    // (~215 GB: a 13B model over 4 x 80 GB GPUs after weights), 16 running sequences. The step
    // costs stay the single-A100 model's.
    o.sim.max_context = 131072;
    o.max_context = 131072;
    o.max_running = 16;
    o.kv_cache_bytes = int64_t{262144} * per_token;
    return o;
  }
  return absl::InvalidArgumentError(
      StrCat("--profile \"", name, "\": expected 13b-a100-64, 13b-a100 or long-context"));
}

absl::StatusOr<double> MeasureReplicaCapacity(const engine::EngineOptions& options,
                                              const WorkloadOptions& workload, int64_t completions,
                                              uint64_t seed, const traces::Trace* trace) {
  // Capacity as without reuse: one replica seeing every request would share far more than a
  // pool does, and overstate what the pool sustains.
  engine::EngineOptions engine = options;
  engine.prefix_cache.enabled = false;
  EXA_ASSIGN_OR_RETURN(auto replica, engine::SimReplica::Create(engine, kEpoch));
  Workload w(workload, seed, trace);
  const int32_t outstanding_target = engine.max_running + engine.max_running / 2;
  int32_t outstanding = 0;
  std::vector<absl::Time> done;
  done.reserve(static_cast<size_t>(completions));
  while (static_cast<int64_t>(done.size()) < completions) {
    while (outstanding < outstanding_target) {
      const WorkItem item = w.Next();
      engine::GenerateRequest g;
      g.prompt_tokens = Workload::PromptTokens(item, engine.sim.vocab_size);
      g.max_tokens = item.max_tokens;
      g.callback = [&](const engine::StreamEvent& e) {
        if (e.finished) {
          outstanding--;
          done.push_back(e.time);
        }
      };
      EXA_RETURN_IF_ERROR(replica->Submit(std::move(g), replica->now()).status());
      outstanding++;
    }
    replica->RunUntil(replica->NextStepTime());
  }
  // The first fifth warms the batch up; the rest is the steady state.
  const size_t skip = done.size() / 5;
  const double seconds = absl::ToDoubleSeconds(done.back() - done[skip]);
  if (seconds <= 0) return absl::InternalError("capacity run finished in no time");
  return static_cast<double>(done.size() - 1 - skip) / seconds;
}

nlohmann::json ToJson(const RunStats& s) {
  const double window = std::max(1e-9, s.window_s);
  nlohmann::json j = {
      {"policy", s.policy},
      {"rho", s.rho},
      {"offered_requests_per_s", s.arrival_rate},
      {"ttft_ms", {{"p50", Quantile(s.ttft_ms, 0.5)}, {"p99", Quantile(s.ttft_ms, 0.99)}}},
      {"e2e_ms", {{"p50", Quantile(s.e2e_ms, 0.5)}, {"p99", Quantile(s.e2e_ms, 0.99)}}},
      {"goodput",
       {{"requests_per_s", static_cast<double>(s.completed) / window},
        {"output_tokens_per_s", static_cast<double>(s.output_tokens) / window}}},
      {"completed", s.completed},
      {"rejections", s.rejected},
      {"failed", s.failed}};
  if (!s.first_error.empty()) j["first_error"] = s.first_error;
  // What only the sim measures (the live mode leaves these out rather than print zeros).
  const int64_t prompt = s.prefix_hit_tokens + s.prefix_miss_tokens;
  if (prompt > 0) {
    j["prefix_hit_ratio"] = static_cast<double>(s.prefix_hit_tokens) / static_cast<double>(prompt);
    j["unbounded_cache_hit_ratio"] = s.unbounded_hit_ratio;
    j["pooled_lru_cache_hit_ratio"] = s.pooled_lru_hit_ratio;
  }
  if (s.load_reports_per_node_s > 0) j["load_reports_per_node_s"] = s.load_reports_per_node_s;
  if (!s.choose_us.empty()) {
    j["decision_us"] = {{"p50", Quantile(s.choose_us, 0.5)},
                        {"p99", Quantile(s.choose_us, 0.99)},
                        {"note",
                         "wall time of ReplicaTable::Choose with the prompt hashing it asks "
                         "for (as deep as some replica's cache reaches), on this machine"}};
    j["prompt_hash_us"] = {
        {"p50", Quantile(s.hash_us, 0.5)},
        {"p99", Quantile(s.hash_us, 0.99)},
        {"note",
         "wall time of hashing every full block of the prompt, which a gateway that "
         "hashed eagerly would add, on this machine"}};
  }
  return j;
}

nlohmann::json Compare(const std::vector<RunStats>& runs, const std::string& reference) {
  auto find = [&](const std::string& policy, double rho) -> const RunStats* {
    for (const RunStats& r : runs) {
      if (r.policy == policy && r.rho == rho) return &r;
    }
    return nullptr;
  };
  std::vector<double> rhos;
  for (const RunStats& r : runs) {
    if (std::find(rhos.begin(), rhos.end(), r.rho) == rhos.end()) rhos.push_back(r.rho);
  }
  nlohmann::json out = nlohmann::json::array();
  for (double rho : rhos) {
    const RunStats* ref = find(reference, rho);
    if (ref == nullptr) continue;
    nlohmann::json c = {{"rho", rho}, {"reference", reference}};
    const double ref_e2e = Quantile(ref->e2e_ms, 0.99), ref_ttft = Quantile(ref->ttft_ms, 0.99);
    const double ref_goodput =
        static_cast<double>(ref->output_tokens) / std::max(1e-9, ref->window_s);
    for (const RunStats& r : runs) {
      if (r.rho != rho || r.policy == reference || ref_e2e <= 0 || ref_ttft <= 0) continue;
      const double goodput = static_cast<double>(r.output_tokens) / std::max(1e-9, r.window_s);
      c[r.policy] = {
          {"p99_e2e_over_reference", Quantile(r.e2e_ms, 0.99) / ref_e2e},
          {"p99_ttft_over_reference", Quantile(r.ttft_ms, 0.99) / ref_ttft},
          {"goodput_diff_percent", 100.0 * (ref_goodput - goodput) / std::max(1e-9, goodput)}};
    }
    out.push_back(std::move(c));
  }
  return out;
}

namespace {

absl::Status ValidateSim(const RouteSimOptions& o) {
  if (o.replicas < 1 || o.gateways < 1 || o.replicas_per_node < 1 || o.requests < 1 ||
      !(o.report_hz > 0) || !(o.cache_report_hz > 0) || !(o.report_change_hz >= 0) ||
      !(o.warmup_fraction >= 0) || o.capacity_requests < 10 || o.slots < 0 || o.policies.empty()) {
    return absl::InvalidArgumentError(
        StrCat("route sim: replicas ", o.replicas, ", gateways ", o.gateways,
               ", replicas-per-node ", o.replicas_per_node, ", requests ", o.requests,
               ", report-hz ", o.report_hz, " and cache-report-hz ", o.cache_report_hz,
               " must be positive, report-change-hz ", o.report_change_hz,
               ", warmup and slots non-negative, capacity-requests at least 10, and "
               "at least one policy given"));
  }
  const WorkloadOptions& w = o.workload;
  if (!(w.prompt_median >= 5 && w.prompt_p99 >= w.prompt_median && w.output_median >= 1 &&
        w.output_p99 >= w.output_median) ||
      o.kv_tokens < 0) {
    return absl::InvalidArgumentError(
        StrCat("route sim: prompt median ", w.prompt_median, " and p99 ", w.prompt_p99,
               ", output median ", w.output_median, " and p99 ", w.output_p99,
               ": medians at least 5 (prompt) and 1 (output), each p99 at least its median; "
               "kv-tokens ",
               o.kv_tokens, " not negative"));
  }
  for (double rho : o.rhos) {
    if (!(rho > 0 && rho <= 2)) {
      return absl::InvalidArgumentError(StrCat("route sim: rho ", rho, " is outside (0, 2]"));
    }
  }
  return absl::OkStatus();
}

// The router policy behind each name; "oracle" is kv-token-aware on instant global state.
struct SimPolicy {
  router::Policy policy;
  bool oracle = false;
};
absl::StatusOr<std::vector<SimPolicy>> ParseSimPolicies(const std::vector<std::string>& names) {
  std::vector<SimPolicy> out;
  for (const std::string& name : names) {
    if (name == "oracle") {
      out.push_back({router::Policy::kKvTokenAware, true});
      continue;
    }
    EXA_ASSIGN_OR_RETURN(router::Policy p, router::ParsePolicy(name));
    out.push_back({p, false});
  }
  return out;
}

// The replicas' engine: the profile with the options' overrides.
absl::StatusOr<engine::EngineOptions> SimEngine(const RouteSimOptions& o) {
  EXA_ASSIGN_OR_RETURN(engine::EngineOptions engine, RouteProfile(o.profile));
  if (o.slots > 0) engine.max_running = o.slots;
  if (o.kv_tokens > 0) engine.kv_cache_bytes = o.kv_tokens * engine.sim.kv_bytes_per_token;
  // Timing does not depend on the vocabulary; a small one keeps the sim's sampling cheap.
  engine.sim.vocab_size = 256;
  engine.prefix_cache_namespace = CacheNamespace(kModel, "v1", "sim");
  // A replica cannot take a prompt (plus its max_tokens) larger than its KV cache: the context
  // the workload clamps to is the smaller of the two.
  const int64_t kv_tokens = engine.kv_cache_bytes / engine.sim.kv_bytes_per_token;
  engine.max_context = static_cast<int32_t>(std::min<int64_t>(engine.sim.max_context, kv_tokens));
  return engine;
}

// One grid cell from a run: `reference`'s P99s over the better of least-connections and
// round-robin, and its goodput below the best of the three.
nlohmann::json GridCell(const nlohmann::json& run, double rho, const std::string& reference) {
  std::map<std::string, nlohmann::json> by;
  for (const auto& r : run["results"]) {
    if (r["rho"].get<double>() == rho) by[r["policy"].get<std::string>()] = r;
  }
  const auto p99 = [&](const std::string& p, const char* field) {
    return by[p][field]["p99"].get<double>();
  };
  const auto goodput = [&](const std::string& p) {
    return by[p]["goodput"]["output_tokens_per_s"].get<double>();
  };
  const auto over_better = [&](const char* field) {
    return p99(reference, field) /
           std::max(1e-9, std::min(p99("least-connections", field), p99("round-robin", field)));
  };
  const double ttft = over_better("ttft_ms"), e2e = over_better("e2e_ms");
  const double best =
      std::max({goodput(reference), goodput("least-connections"), goodput("round-robin")});
  const double gap = 100.0 * (best - goodput(reference)) / std::max(1e-9, best);
  nlohmann::json cell = {{"rho", rho}};
  for (const char* field : {"ttft_ms", "e2e_ms"}) {
    for (const std::string& p :
         {reference, std::string("least-connections"), std::string("round-robin")}) {
      cell[StrCat("p99_", field)][p] = p99(p, field);
    }
  }
  cell["p99_ttft_over_better"] = ttft;
  cell["p99_e2e_over_better"] = e2e;
  cell["goodput_below_best_percent"] = gap;
  cell["within"] = ttft <= 1.03 && e2e <= 1.03 && gap <= 2.0;
  return cell;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunRouteSim(const RouteSimOptions& options) {
  RouteSimOptions o = options;
  EXA_RETURN_IF_ERROR(ValidateSim(o));
  EXA_ASSIGN_OR_RETURN(const std::vector<SimPolicy> policies, ParseSimPolicies(o.policies));
  EXA_ASSIGN_OR_RETURN(const engine::EngineOptions engine, SimEngine(o));
  o.workload.context = engine.max_context;
  EXA_ASSIGN_OR_RETURN(const std::optional<traces::Trace> trace, traces::ReadTraceIfAny(o.trace));
  const traces::Trace* t = trace ? &*trace : nullptr;
  EXA_ASSIGN_OR_RETURN(const double per_replica,
                       MeasureReplicaCapacity(engine, o.workload, o.capacity_requests, o.seed, t));
  const double capacity = per_replica * o.replicas;
  const auto warmup = static_cast<int64_t>(o.warmup_fraction * static_cast<double>(o.requests));
  std::vector<RunStats> runs;
  nlohmann::json results = nlohmann::json::array();
  for (double rho : o.rhos) {
    for (size_t p = 0; p < policies.size(); ++p) {
      // The same seed for every policy at a rho: the same arrivals and the same requests.
      Simulation sim(o, engine, policies[p].policy, policies[p].oracle, rho * capacity, o.seed, t);
      EXA_RETURN_IF_ERROR(sim.Init());
      RunStats stats = sim.Run(warmup, o.requests);
      stats.policy = o.policies[p];
      stats.rho = rho;
      stats.arrival_rate = rho * capacity;
      results.push_back(ToJson(stats));
      runs.push_back(std::move(stats));
    }
  }
  return nlohmann::json{
      {"mode", "sim"},
      {"seed", o.seed},
      {"profile", o.profile},
      {"replicas", o.replicas},
      {"replicas_per_node", o.replicas_per_node},
      {"gateways", o.gateways},
      {"report_hz", o.report_hz},
      {"report_change_hz", o.report_change_hz},
      {"cache_report_hz", o.cache_report_hz},
      {"requests_per_run", o.requests},
      {"warmup_requests", warmup},
      {"workload", Workload(o.workload, o.seed, t).Describe()},
      {"engine", DescribeEngine(engine)},
      {"capacity",
       {{"per_replica_requests_per_s", per_replica},
        {"total_requests_per_s", capacity},
        {"method", StrCat("one sim replica without prefix reuse kept saturated (",
                          engine.max_running + engine.max_running / 2,
                          " requests outstanding, max_running ", engine.max_running,
                          ") on the same workload; completions per virtual second after "
                          "the first fifth of ",
                          o.capacity_requests, ", times the replica count")}}},
      {"results", std::move(results)},
      {"comparisons", Compare(runs, o.policies.front())},
  };
}

absl::StatusOr<nlohmann::json> RunRouteGrid(const RouteSimOptions& options,
                                            const std::vector<std::string>& traces) {
  struct GridWorkload {
    std::string name, trace;
    WorkloadOptions options;
  };
  std::vector<GridWorkload> workloads = {{"synthetic-short", "", options.workload},
                                         {"synthetic-heavy", "", options.workload}};
  workloads[1].options.prompt_median = 400;
  workloads[1].options.prompt_p99 = 20000;
  for (const std::string& t : traces) workloads.push_back({t, t, options.workload});
  const std::string reference = options.policies.front();
  nlohmann::json rows = nlohmann::json::array();
  int cells = 0, within = 0;
  for (const GridWorkload& w : workloads) {
    for (int32_t slots : {4, 16, 64}) {
      RouteSimOptions o = options;
      o.profile = "long-context";
      o.slots = slots;
      o.trace = w.trace;
      o.workload = w.options;
      o.policies = {reference, "least-connections", "round-robin"};
      EXA_ASSIGN_OR_RETURN(nlohmann::json run, RunRouteSim(o));
      for (double rho : o.rhos) {
        nlohmann::json cell = GridCell(run, rho, reference);
        cell["workload"] = w.name;
        cell["slots"] = slots;
        const bool ok = cell["within"].get<bool>();
        cells++;
        within += ok ? 1 : 0;
        std::fprintf(stderr, "| %s | %d | %.2f | %.2f | %.2f | %.1f | %s |\n", w.name.c_str(),
                     slots, rho, cell["p99_ttft_over_better"].get<double>(),
                     cell["p99_e2e_over_better"].get<double>(),
                     cell["goodput_below_best_percent"].get<double>(), ok ? "yes" : "no");
        rows.push_back(std::move(cell));
      }
    }
  }
  return nlohmann::json{{"mode", "grid"},
                        {"seed", options.seed},
                        {"reference", reference},
                        {"replicas", options.replicas},
                        {"gateways", options.gateways},
                        {"requests_per_run", options.requests},
                        {"profile", "long-context (KV and context), slots per row"},
                        {"cells", cells},
                        {"cells_within", within},
                        {"grid", std::move(rows)}};
}

}  // namespace exa::bench
