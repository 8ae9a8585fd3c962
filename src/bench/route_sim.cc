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
//            second, each node at its own phase; what was dispatched since is forgotten, as in
//            ReplicaTable::Report.
// A report reflects each replica's state after the step it is in (at most one step, ~20-45 ms,
// ahead of the report's time); the real WatchLoad stream reads the engine's last published load,
// which is up to one step behind. Both are within the 100 ms report period.
#include <algorithm>
#include <memory>
#include <queue>
#include <unordered_map>

#include "absl/time/time.h"
#include "bench/route_bench.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/sim_replica.h"
#include "router/replica_table.h"

namespace exa::bench {
namespace {

const absl::Time kEpoch = absl::FromUnixSeconds(1'000'000);
constexpr char kModel[] = "sim-13b";

enum class Kind { kStep, kFinish, kReport, kArrival };

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
};

class Simulation {
 public:
  Simulation(const RouteSimOptions& o, const engine::EngineOptions& engine, router::Policy policy,
             double rate, uint64_t seed)
      : o_(o), engine_(engine), rate_(rate), workload_(o.workload, seed), random_(seed ^ 0xA5A5) {
    for (int32_t g = 0; g < o.gateways; ++g) {
      tables_.push_back(std::make_unique<router::ReplicaTable>(policy, seed * 131 + g));
    }
  }

  absl::Status Init() {
    for (int32_t r = 0; r < o_.replicas; ++r) {
      EXA_ASSIGN_OR_RETURN(auto replica, engine::SimReplica::Create(engine_, kEpoch));
      replicas_.push_back(std::move(replica));
      ids_.push_back(
          StrCat("node-", r / o_.replicas_per_node, "/", kModel, "@v1#", r % o_.replicas_per_node));
      index_[ids_.back()] = r;
      for (auto& t : tables_) t->Upsert({ids_.back(), kModel, "v1", {}});
    }
    scheduled_.assign(replicas_.size(), absl::InfiniteFuture());
    const int32_t nodes = (o_.replicas + o_.replicas_per_node - 1) / o_.replicas_per_node;
    const absl::Duration period = absl::Seconds(1.0 / o_.report_hz);
    for (int32_t n = 0; n < nodes; ++n) {
      Report(n);  // every replica known and ready from the start
      Push(kEpoch + period * random_.UniformDouble(), Kind::kReport, n);
    }
    Push(kEpoch, Kind::kArrival, 0);
    return absl::OkStatus();
  }

  RunStats Run(int64_t warmup, int64_t measured) {
    total_ = warmup + measured;
    warmup_ = warmup;
    requests_.resize(static_cast<size_t>(total_));
    const absl::Duration period = absl::Seconds(1.0 / o_.report_hz);
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
          tables_[requests_[e.index].gateway]->Complete(ids_[requests_[e.index].replica]);
          break;
        case Kind::kReport:
          Report(static_cast<int32_t>(e.index));
          Push(e.time + period, Kind::kReport, e.index);
          break;
      }
    }
    stats_.window_s = absl::ToDoubleSeconds(last_measured_ - first_measured_);
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
    Schedule(r);
  }

  void Report(int32_t node) {
    const int32_t begin = node * o_.replicas_per_node;
    const int32_t end = std::min(o_.replicas, begin + o_.replicas_per_node);
    for (int32_t r = begin; r < end; ++r) {
      const engine::EngineLoad load = replicas_[r]->Load();
      const router::LoadReport report{load.pending_tokens, load.running + load.waiting, true,
                                      load.blocked};
      for (auto& t : tables_) t->Report(ids_[r], report);
    }
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
    req.gateway = static_cast<int32_t>(random_.Uniform(tables_.size()));
    router::ReplicaTable& table = *tables_[req.gateway];
    auto chosen = table.Choose({kModel, "", item.prompt_tokens, {}});
    if (!chosen.ok()) {
      if (req.measured) stats_.rejected++;
      return;
    }
    req.replica = index_.at(*chosen);
    engine::GenerateRequest g;
    g.prompt_tokens = Workload::PromptTokens(item, engine_.sim.vocab_size);
    g.max_tokens = item.max_tokens;
    g.callback = [this, i](const engine::StreamEvent& e) { OnEvent(i, e); };
    auto id = replicas_[req.replica]->Submit(std::move(g), now_);
    if (!id.ok()) {
      table.Complete(*chosen);
      if (req.measured) stats_.rejected++;
      return;
    }
    open_++;
    Schedule(req.replica);
  }

  void OnEvent(int64_t i, const engine::StreamEvent& e) {
    Request& req = requests_[i];
    if (e.token >= 0 && !req.first_token) req.first_token = e.time;
    if (!e.finished) return;
    open_--;
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
  Workload workload_;
  Random random_;
  std::vector<std::unique_ptr<router::ReplicaTable>> tables_;
  std::vector<std::unique_ptr<engine::SimReplica>> replicas_;
  std::vector<std::string> ids_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<absl::Time> scheduled_;
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

absl::StatusOr<double> MeasureReplicaCapacity(const engine::EngineOptions& engine,
                                              const WorkloadOptions& workload, int64_t completions,
                                              uint64_t seed) {
  EXA_ASSIGN_OR_RETURN(auto replica, engine::SimReplica::Create(engine, kEpoch));
  Workload w(workload, seed);
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
  return {{"policy", s.policy},
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
}

nlohmann::json Compare(const std::vector<RunStats>& runs) {
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
    const RunStats* ta = find("token-aware", rho);
    if (ta == nullptr) continue;
    nlohmann::json c = {{"rho", rho}};
    const double ta_e2e = Quantile(ta->e2e_ms, 0.99), ta_ttft = Quantile(ta->ttft_ms, 0.99);
    const double ta_goodput = static_cast<double>(ta->output_tokens) / std::max(1e-9, ta->window_s);
    for (const char* other : {"least-connections", "round-robin", "least-requests", "random"}) {
      const RunStats* r = find(other, rho);
      if (r == nullptr || ta_e2e <= 0 || ta_ttft <= 0) continue;
      const double goodput = static_cast<double>(r->output_tokens) / std::max(1e-9, r->window_s);
      c[other] = {
          {"p99_e2e_over_token_aware", Quantile(r->e2e_ms, 0.99) / ta_e2e},
          {"p99_ttft_over_token_aware", Quantile(r->ttft_ms, 0.99) / ta_ttft},
          {"goodput_diff_percent", 100.0 * (ta_goodput - goodput) / std::max(1e-9, goodput)}};
    }
    out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<nlohmann::json> RunRouteSim(const RouteSimOptions& o) {
  if (o.replicas < 1 || o.gateways < 1 || o.replicas_per_node < 1 || o.requests < 1 ||
      !(o.report_hz > 0) || !(o.warmup_fraction >= 0) || o.capacity_requests < 10) {
    return absl::InvalidArgumentError(StrCat(
        "route sim: replicas ", o.replicas, ", gateways ", o.gateways, ", replicas-per-node ",
        o.replicas_per_node, ", requests ", o.requests, " and report-hz ", o.report_hz,
        " must be positive, warmup non-negative, capacity-requests at least 10"));
  }
  std::vector<router::Policy> policies;
  for (const std::string& name : o.policies) {
    EXA_ASSIGN_OR_RETURN(router::Policy p, router::ParsePolicy(name));
    policies.push_back(p);
  }
  for (double rho : o.rhos) {
    if (!(rho > 0 && rho <= 2)) {
      return absl::InvalidArgumentError(StrCat("route sim: rho ", rho, " is outside (0, 2]"));
    }
  }
  engine::EngineOptions engine = BenchEngineOptions();
  // Timing does not depend on the vocabulary; a small one keeps the sim's sampling cheap.
  engine.sim.vocab_size = 256;
  engine.max_context = o.workload.context;
  EXA_ASSIGN_OR_RETURN(const double per_replica,
                       MeasureReplicaCapacity(engine, o.workload, o.capacity_requests, o.seed));
  const double capacity = per_replica * o.replicas;
  const auto warmup = static_cast<int64_t>(o.warmup_fraction * static_cast<double>(o.requests));
  std::vector<RunStats> runs;
  nlohmann::json results = nlohmann::json::array();
  for (double rho : o.rhos) {
    for (size_t p = 0; p < policies.size(); ++p) {
      // The same seed for every policy at a rho: the same arrivals and the same requests.
      Simulation sim(o, engine, policies[p], rho * capacity, o.seed);
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
      {"replicas", o.replicas},
      {"replicas_per_node", o.replicas_per_node},
      {"gateways", o.gateways},
      {"report_hz", o.report_hz},
      {"requests_per_run", o.requests},
      {"warmup_requests", warmup},
      {"workload", Workload(o.workload, o.seed).Describe()},
      {"engine", DescribeEngine(engine)},
      {"capacity",
       {{"per_replica_requests_per_s", per_replica},
        {"total_requests_per_s", capacity},
        {"method",
         StrCat("one sim replica kept saturated (", engine.max_running + engine.max_running / 2,
                " requests outstanding, max_running ", engine.max_running,
                ") on the same workload; completions per virtual second after the first fifth of ",
                o.capacity_requests, ", times the replica count")}}},
      {"results", std::move(results)},
      {"comparisons", Compare(runs)},
  };
}

}  // namespace exa::bench
