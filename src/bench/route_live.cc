#include "bench/route_live.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/process.h"
#include "bench/route_bench.h"
#include "common/status.h"
#include "common/strings.h"
#include "exaserve/v1/inference.grpc.pb.h"
#include "exaserve/v1/node.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "net/tls.h"
#include "router/policy.h"

namespace exa::bench {
namespace {

using exaserve::v1::GenerateResponse;

// GET http://127.0.0.1:port/path, the body ("" on any failure). Enough for /metrics.
std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string body;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req =
        StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[16384];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof(buf))) > 0) body.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  const size_t at = body.find("\r\n\r\n");
  return at == std::string::npos ? "" : body.substr(at + 4);
}

// The value of the first sample line of `metrics` starting with `prefix`, or 0.
double MetricValue(const std::string& metrics, const std::string& prefix) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) {
      const size_t sp = line.rfind(' ');
      return sp == std::string::npos ? 0.0 : std::atof(line.c_str() + sp + 1);
    }
  }
  return 0.0;
}

// The upper bound of the bucket holding quantile `q` of histogram `name` in `metrics` (0 when it
// has no samples): a bucket's resolution, not an interpolation.
double HistogramQuantile(const std::string& metrics, const std::string& name, double q) {
  std::vector<std::pair<double, double>> buckets;  // (le, cumulative count)
  std::istringstream in(metrics);
  std::string line;
  const std::string prefix = name + "_bucket{le=\"";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t close = line.find('"', prefix.size());
    const size_t sp = line.rfind(' ');
    if (close == std::string::npos || sp == std::string::npos) continue;
    const std::string le = line.substr(prefix.size(), close - prefix.size());
    buckets.emplace_back(
        le == "+Inf" ? std::numeric_limits<double>::infinity() : std::atof(le.c_str()),
        std::atof(line.c_str() + sp + 1));
  }
  if (buckets.empty() || buckets.back().second <= 0) return 0;
  for (const auto& [le, count] : buckets) {
    if (count >= q * buckets.back().second) return le;
  }
  return buckets.back().first;
}

// ---- Load generation ---------------------------------------------------------------------------

struct CallResult {
  int64_t index = -1;  // the request's number in its run's workload
  absl::Time start;
  std::optional<absl::Time> first_token;
  absl::Time end;
  int32_t tokens = 0;
  std::vector<int32_t> ids;  // the tokens, when the run keeps them (the kill runs)
  absl::Duration max_gap;    // the longest wait between two tokens
  std::optional<absl::Time> last_token;
  grpc::StatusCode code = grpc::OK;
  std::string error;  // the status message when not OK
  bool via_gateway = true;
  bool measured = true;
};

class Recorder {
 public:
  void Started() {
    absl::MutexLock lock(&mu_);
    open_++;
  }
  void Done(CallResult r) {
    absl::MutexLock lock(&mu_);
    results_.push_back(std::move(r));
    open_--;
  }
  // Waits until every started call ended (each has a deadline, so this returns).
  std::vector<CallResult> Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* open) { return *open == 0; }, &open_));
    return std::move(results_);
  }

 private:
  absl::Mutex mu_;
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<CallResult> results_ ABSL_GUARDED_BY(mu_);
};

// One streaming call, through the gateway (Inference.Generate) or direct (Node.Generate).
class StreamCall final : public grpc::ClientReadReactor<GenerateResponse> {
 public:
  // The recorder is shared: a caller woken by the last Done() may return (and drop its
  // reference) while that Done() is still releasing the recorder's mutex.
  StreamCall(std::shared_ptr<Recorder> recorder, absl::Duration timeout, bool measured,
             int64_t index = -1, bool keep_ids = false)
      : recorder_(std::move(recorder)), keep_ids_(keep_ids) {
    result_.index = index;
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    result_.measured = measured;
  }
  void StartGateway(exaserve::v1::Inference::Stub& stub, exaserve::v1::GenerateRequest request) {
    gateway_request_ = std::move(request);
    result_.via_gateway = true;
    Begin();
    stub.async()->Generate(&context_, &gateway_request_, this);
    StartRead(&response_);
    StartCall();
  }
  void StartDirect(exaserve::v1::Node::Stub& stub, exaserve::v1::NodeGenerateRequest request) {
    node_request_ = std::move(request);
    result_.via_gateway = false;
    Begin();
    stub.async()->Generate(&context_, &node_request_, this);
    StartRead(&response_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (response_.token_ids_size() > 0) {
      const absl::Time now = absl::Now();
      if (!result_.first_token) result_.first_token = now;
      if (result_.last_token)
        result_.max_gap = std::max(result_.max_gap, now - *result_.last_token);
      result_.last_token = now;
      result_.tokens += response_.token_ids_size();
      if (keep_ids_) {
        result_.ids.insert(result_.ids.end(), response_.token_ids().begin(),
                           response_.token_ids().end());
      }
    }
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    result_.end = absl::Now();
    result_.code = status.error_code();
    if (!status.ok()) result_.error = status.error_message();
    recorder_->Done(std::move(result_));
    delete this;
  }

 private:
  void Begin() {
    recorder_->Started();
    result_.start = absl::Now();
  }
  std::shared_ptr<Recorder> recorder_;
  const bool keep_ids_;
  grpc::ClientContext context_;
  exaserve::v1::GenerateRequest gateway_request_;
  exaserve::v1::NodeGenerateRequest node_request_;
  GenerateResponse response_;
  CallResult result_;
};

// A greedy request; with a `seed`, sampled (temperature 0.8) with that seed, so two runs of the
// same workload ask for the same tokens.
exaserve::v1::GenerateRequest ToProto(const std::vector<int32_t>& prompt, int32_t max_tokens,
                                      std::optional<uint64_t> seed = std::nullopt) {
  exaserve::v1::GenerateRequest r;
  r.mutable_prompt_tokens()->mutable_ids()->Add(prompt.begin(), prompt.end());
  r.set_max_tokens(max_tokens);
  r.mutable_sampling()->set_top_p(1.0f);
  if (seed) {
    r.mutable_sampling()->set_temperature(0.8f);
    r.mutable_sampling()->set_seed(*seed);
  }
  return r;
}

std::shared_ptr<grpc::Channel> Channel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_CONCURRENT_STREAMS, 100000);
  auto channel = net::NewChannel(target, args);
  // Every channel lives until the process exits (one per phase, a handful). gRPC 1.51 shares a
  // refcounted completion queue among the channels that use the callback API; destroying the
  // last one while its threads wind down and creating the next phase's channel double-frees it
  // (AddressSanitizer: grpc_cq_internal_unref on a gRPC thread).
  static auto* keep = new std::vector<std::shared_ptr<grpc::Channel>>();
  static absl::Mutex keep_mu;
  absl::MutexLock lock(&keep_mu);
  keep->push_back(channel);
  return channel;
}

// Open-loop Poisson arrivals for `duration`; `start_one(i, measured)` starts request i.
// Starts requests until `duration` has passed, `gap()` seconds apart.
void Drive(const std::function<double()>& gap, absl::Duration duration,
           const std::function<void(int64_t)>& start_one,
           const std::function<void(absl::Duration)>& at_elapsed = nullptr) {
  const absl::Time t0 = absl::Now();
  absl::Duration next;
  int64_t i = 0;
  while (next < duration) {
    const absl::Time due = t0 + next;
    const absl::Time now = absl::Now();
    if (due > now) absl::SleepFor(due - now);
    if (at_elapsed) at_elapsed(next);
    start_one(i++);
    next += absl::Seconds(gap());
  }
}

// Poisson arrivals at `rate` per second.
std::function<double()> PoissonGaps(double rate, uint64_t seed) {
  auto random = std::make_shared<Random>(seed);
  return [random, rate] { return -std::log(1.0 - random->UniformDouble()) / rate; };
}

RunStats Summarize(const std::vector<CallResult>& results, double window_s) {
  RunStats s;
  s.window_s = window_s;
  for (const CallResult& r : results) {
    if (!r.measured) continue;
    if (r.code == grpc::OK && r.first_token) {
      s.completed++;
      s.output_tokens += r.tokens;
      s.ttft_ms.push_back(absl::ToDoubleMilliseconds(*r.first_token - r.start));
      s.e2e_ms.push_back(absl::ToDoubleMilliseconds(r.end - r.start));
    } else if (r.code == grpc::RESOURCE_EXHAUSTED) {
      s.rejected++;
    } else {
      s.failed++;
      if (s.first_error.empty()) {
        s.first_error = StrCat("gRPC code ", static_cast<int>(r.code), ": ", r.error);
      }
    }
  }
  return s;
}

absl::StatusOr<std::string> WorkDir(const RouteLiveOptions& o) {
  if (!o.work_dir.empty()) return o.work_dir;
  char tmpl[] = "/tmp/exaserve-route-XXXXXX";  // mkdtemp replaces the X's
  if (::mkdtemp(tmpl) == nullptr) {
    return absl::InternalError(
        StrCat("cannot create a work dir under /tmp: ", std::strerror(errno), "; pass --work-dir"));
  }
  return std::string(tmpl);
}

// Prompt token ids stay below this: the gateway refuses ids outside the served model's
// vocabulary (the bundled model has 366), and timing does not depend on them.
constexpr int32_t kLiveVocab = 256;

std::vector<std::pair<std::string, std::string>> InferenceEnv(int32_t replicas) {
  const engine::EngineOptions e = BenchEngineOptions();
  return {{"EXASERVE_INFERENCE_BACKEND", "sim"},
          {"EXASERVE_INFERENCE_REPLICAS_PER_MODEL", StrCat(replicas)},
          {"EXASERVE_INFERENCE_KV_CACHE_BYTES", StrCat(e.kv_cache_bytes)},
          {"EXASERVE_INFERENCE_MAX_BATCH_TOKENS", StrCat(e.max_batch_tokens)},
          {"EXASERVE_INFERENCE_MAX_RUNNING", StrCat(e.max_running)},
          {"EXASERVE_INFERENCE_MAX_QUEUE", StrCat(e.max_queue)}};
}

struct Cluster {
  std::string dir;
  std::vector<std::unique_ptr<Process>> nodes;
  std::string seed() const { return StrCat("127.0.0.1:", nodes[0]->gossip_port()); }
};

absl::StatusOr<Cluster> StartCluster(const RouteLiveOptions& o, int32_t nodes, int32_t replicas) {
  Cluster c;
  EXA_ASSIGN_OR_RETURN(c.dir, WorkDir(o));
  for (int32_t n = 0; n < nodes; ++n) {
    std::vector<std::string> args = {"--role", "inference"};
    if (n > 0) args.insert(args.end(), {"--join", c.seed()});
    EXA_ASSIGN_OR_RETURN(auto p, Process::Start(o.exaserved, StrCat(c.dir, "/node", n), args,
                                                InferenceEnv(replicas)));
    c.nodes.push_back(std::move(p));
  }
  return c;
}

// A gateway-only node on `cluster`, ready once it watches every node's load stream and routes.
absl::StatusOr<std::unique_ptr<Process>> StartGateway(const RouteLiveOptions& o,
                                                      const Cluster& cluster,
                                                      const std::string& policy, int index) {
  EXA_ASSIGN_OR_RETURN(auto gw, Process::Start(o.exaserved, StrCat(cluster.dir, "/gateway", index),
                                               {"--role", "gateway", "--join", cluster.seed()},
                                               {{"EXASERVE_GATEWAY_ROUTING_POLICY", policy},
                                                {"EXASERVE_GATEWAY_MAX_IN_FLIGHT", "100000"}}));
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    const double watched =
        MetricValue(HttpGet(gw->http_port(), "/metrics"), "exaserve_gateway_watched_nodes");
    if (watched >= static_cast<double>(cluster.nodes.size())) {
      // One more report period so every replica is in the table with a fresh load.
      absl::SleepFor(absl::Seconds(1));
      return gw;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  return absl::DeadlineExceededError(
      StrCat("gateway did not watch all ", cluster.nodes.size(), " nodes within 60 s"));
}

struct LiveRun {
  RunStats stats;
  std::vector<CallResult> results;
};

// Drives the workload through `gateway_target` at `rate` for `duration_s`; `keep_ids` keeps
// every call's tokens (and samples odd requests with a seed).
LiveRun DriveWorkload(const RouteLiveOptions& o, const traces::Trace* trace,
                      const std::string& gateway_target, double rate,
                      const std::function<void(absl::Duration)>& at_elapsed = nullptr,
                      bool keep_ids = false) {
  auto channel = Channel(gateway_target);
  auto stub = exaserve::v1::Inference::NewStub(channel);
  Workload workload(o.workload, o.seed, trace);
  auto recorder = std::make_shared<Recorder>();
  const absl::Duration timeout = absl::Seconds(o.call_timeout_s);
  // Synthetic: Poisson; a trace: its own gaps, scaled to the rate.
  const std::function<double()> gap =
      trace != nullptr ? std::function<double()>([&] { return workload.NextGap(rate); })
                       : PoissonGaps(rate, o.seed ^ 0x5EED);
  Drive(
      gap, absl::Seconds(o.duration_s),
      [&](int64_t i) {
        const WorkItem item = workload.Next();
        auto* call = new StreamCall(recorder, timeout, true, i, keep_ids);
        // Kept runs sample their odd requests, seeded by their number.
        std::optional<uint64_t> seed;
        if (keep_ids && i % 2 == 1) seed = static_cast<uint64_t>(i);
        call->StartGateway(
            *stub, ToProto(Workload::PromptTokens(item, kLiveVocab), item.max_tokens, seed));
      },
      at_elapsed);
  LiveRun run;
  run.results = recorder->Wait();
  run.stats = Summarize(run.results, o.duration_s);
  return run;
}

absl::Status ValidateLive(const RouteLiveOptions& o) {
  if (o.nodes < 1 || o.replicas_per_node < 1 || !(o.duration_s > 0) || !(o.call_timeout_s > 0) ||
      !(o.overhead_rate > 0) || !(o.overhead_duration_s > 0) || o.overhead_max_tokens < 1 ||
      o.overhead_prompt_tokens < 5) {
    return absl::InvalidArgumentError(StrCat(
        "route live: nodes ", o.nodes, ", replicas-per-node ", o.replicas_per_node, ", duration ",
        o.duration_s, ", call-timeout ", o.call_timeout_s,
        ", overhead rate/duration/max-tokens must be positive and overhead prompt at least 5"));
  }
  if (o.kill_nodes < 0 || (o.kill_nodes > 0 && o.kill_nodes >= o.nodes)) {
    return absl::InvalidArgumentError(StrCat("route live: --kill-nodes ", o.kill_nodes,
                                             " must leave at least one of the ", o.nodes,
                                             " nodes (0 to ", o.nodes - 1, ")"));
  }
  if (o.gateway_addr.empty() && !std::filesystem::exists(o.exaserved)) {
    return absl::InvalidArgumentError(
        StrCat("route live: exaserved not found at \"", o.exaserved, "\" (--exaserved PATH)"));
  }
  if (!o.gateway_addr.empty() && (o.policies.size() != 1 || o.kill_nodes > 0)) {
    return absl::InvalidArgumentError(
        "route live: with --gateway, name the one policy that gateway runs (--policies P) and "
        "leave out --kill-one / --kill-nodes");
  }
  for (double rho : o.rhos) {
    if (!(rho > 0 && rho <= 2)) {
      return absl::InvalidArgumentError(StrCat("route live: rho ", rho, " is outside (0, 2]"));
    }
  }
  for (const std::string& p : o.policies) EXA_RETURN_IF_ERROR(router::ParsePolicy(p).status());
  return absl::OkStatus();
}

// What one replica sustains, as the sim measures it (the nodes run the same engine options).
absl::StatusOr<double> LiveReplicaCapacity(const RouteLiveOptions& o, const traces::Trace* trace) {
  engine::EngineOptions engine = BenchEngineOptions();
  engine.sim.vocab_size = 256;  // timing does not depend on it; the capacity run is faster
  return MeasureReplicaCapacity(engine, o.workload, o.capacity_requests, o.seed, trace);
}

// How the kill run's requests fared against the fault-free run of the same workload.
nlohmann::json CompareKillRun(const std::vector<CallResult>& base,
                              const std::vector<CallResult>& run,
                              const std::vector<absl::Time>& kills) {
  std::map<int64_t, const CallResult*> by_index;
  for (const CallResult& r : base) by_index[r.index] = &r;
  int64_t ok = 0, failed = 0, hung = 0, rejected = 0, compared = 0, mismatched = 0;
  std::vector<double> gaps_ms;
  for (const CallResult& r : run) {
    if (r.code == grpc::DEADLINE_EXCEEDED) {
      hung++;
    } else if (r.code == grpc::RESOURCE_EXHAUSTED) {
      rejected++;
    } else if (r.code != grpc::OK) {
      failed++;
    } else {
      ok++;
    }
    auto b = by_index.find(r.index);
    if (r.code == grpc::OK && b != by_index.end() && b->second->code == grpc::OK) {
      compared++;
      mismatched += r.ids != b->second->ids ? 1 : 0;
    }
    // A stream that had tokens when a node died and went on: its longest pause is the resume's.
    for (absl::Time k : kills) {
      if (r.code == grpc::OK && r.first_token && *r.first_token < k && r.end > k) {
        gaps_ms.push_back(absl::ToDoubleMilliseconds(r.max_gap));
        break;
      }
    }
  }
  return {{"requests", run.size()},
          {"succeeded", ok},
          {"failed", failed},
          {"rejected", rejected},
          {"hung", hung},
          {"compared_streams", compared},
          {"mismatched_streams", mismatched},
          {"streams_across_a_kill", gaps_ms.size()},
          {"longest_gap_ms_p50", gaps_ms.empty() ? 0.0 : Quantile(gaps_ms, 0.5)},
          {"longest_gap_ms_p99", gaps_ms.empty() ? 0.0 : Quantile(gaps_ms, 0.99)}};
}

// A fault-free kv-token-aware run, then the same workload again while `kill_nodes` inference
// processes are killed with SIGKILL one after another (the k-th at duration × k / (N + 1)):
// every stream that succeeded in both must carry the same tokens.
absl::StatusOr<nlohmann::json> RunKills(const RouteLiveOptions& o, Cluster& cluster,
                                        const traces::Trace* trace, double rate,
                                        int& gateway_index) {
  EXA_ASSIGN_OR_RETURN(auto base_gw, StartGateway(o, cluster, "kv-token-aware", gateway_index++));
  LiveRun base = DriveWorkload(o, trace, base_gw->grpc_target(), rate, nullptr, true);
  base_gw->Stop();
  EXA_ASSIGN_OR_RETURN(auto gw, StartGateway(o, cluster, "kv-token-aware", gateway_index++));
  std::vector<absl::Time> kills;
  LiveRun run = DriveWorkload(
      o, trace, gw->grpc_target(), rate,
      [&](absl::Duration at) {
        const auto k = static_cast<int32_t>(kills.size());
        if (k < o.kill_nodes && at >= absl::Seconds(o.duration_s * (k + 1) / (o.kill_nodes + 1))) {
          kills.push_back(absl::Now());
          cluster.nodes[cluster.nodes.size() - 1 - static_cast<size_t>(k)]->Kill9();
        }
      },
      true);
  const std::string metrics = HttpGet(gw->http_port(), "/metrics");
  nlohmann::json out = CompareKillRun(base.results, run.results, kills);
  out["policy"] = "kv-token-aware";
  out["rate"] = rate;
  out["killed_nodes"] = kills.size();
  out["baseline_succeeded"] = base.stats.completed;
  nlohmann::json resumes;
  for (const char* cause : {"stream_error", "stalled", "node_suspect", "ejected"}) {
    resumes[cause] =
        MetricValue(metrics, StrCat("exaserve_gateway_resumes_total{cause=\"", cause, "\"}"));
  }
  out["resumes"] = std::move(resumes);
  out["retried"] = MetricValue(metrics, "exaserve_gateway_retries_total{outcome=\"sent\"}");
  // The pause of the resumed streams themselves, as the gateway measured it.
  for (const auto& [key, q] :
       {std::pair("resume_gap_ms_p50_bucket", 0.5), std::pair("resume_gap_ms_p99_bucket", 0.99)}) {
    out[key] = 1000 * HistogramQuantile(metrics, "exaserve_gateway_resume_gap_seconds", q);
  }
  std::fprintf(stderr, "%s\n", out.dump().c_str());
  gw->Stop();
  return out;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunRouteLive(const RouteLiveOptions& o) {
  EXA_RETURN_IF_ERROR(ValidateLive(o));
  EXA_ASSIGN_OR_RETURN(const std::optional<traces::Trace> loaded, traces::ReadTraceIfAny(o.trace));
  const traces::Trace* trace = loaded ? &*loaded : nullptr;
  EXA_ASSIGN_OR_RETURN(const double per_replica, LiveReplicaCapacity(o, trace));
  const double capacity = per_replica * o.nodes * o.replicas_per_node;
  const absl::Time began = absl::Now();

  Cluster cluster;
  if (o.gateway_addr.empty()) {
    EXA_ASSIGN_OR_RETURN(cluster, StartCluster(o, o.nodes, o.replicas_per_node));
  }
  std::vector<RunStats> runs;
  nlohmann::json results = nlohmann::json::array();
  int gateway_index = 0;
  for (double rho : o.rhos) {
    for (const std::string& policy : o.policies) {
      std::unique_ptr<Process> gw;
      std::string target = o.gateway_addr;
      if (target.empty()) {
        EXA_ASSIGN_OR_RETURN(gw, StartGateway(o, cluster, policy, gateway_index++));
        target = gw->grpc_target();
      }
      LiveRun run = DriveWorkload(o, trace, target, rho * capacity);
      run.stats.policy = policy;
      run.stats.rho = rho;
      run.stats.arrival_rate = rho * capacity;
      nlohmann::json j = ToJson(run.stats);
      j["hung"] = std::count_if(run.results.begin(), run.results.end(), [](const CallResult& r) {
        return r.code == grpc::DEADLINE_EXCEEDED;
      });
      // Progress on stderr, so a long run shows its figures as they come.
      std::fprintf(stderr, "%s\n", j.dump().c_str());
      results.push_back(std::move(j));
      runs.push_back(std::move(run.stats));
      if (gw) gw->Stop();
    }
  }

  nlohmann::json kill = nullptr;
  if (o.kill_nodes > 0) {
    EXA_ASSIGN_OR_RETURN(kill,
                         RunKills(o, cluster, trace, o.rhos.back() * capacity, gateway_index));
  }
  for (auto& n : cluster.nodes) n->Stop();
  nlohmann::json out = {
      {"mode", "live"},
      {"seed", o.seed},
      {"nodes", o.nodes},
      {"replicas_per_node", o.replicas_per_node},
      {"gateways", 1},
      {"duration_s_per_run", o.duration_s},
      {"workload", Workload(o.workload, o.seed, trace).Describe()},
      {"engine", DescribeEngine(BenchEngineOptions())},
      {"capacity",
       {{"per_replica_requests_per_s", per_replica},
        {"total_requests_per_s", capacity},
        {"method",
         "the sim cost model's saturation throughput per replica (as --mode sim) times the "
         "replica count; live steps also pay real CPU time, so real capacity is a little lower"}}},
      {"results", std::move(results)},
      {"comparisons", Compare(runs, o.policies.front())},
      {"wall_s", absl::ToDoubleSeconds(absl::Now() - began)},
  };
  if (!o.gateway_addr.empty()) out["gateway"] = o.gateway_addr;
  if (!kill.is_null()) out["kills"] = std::move(kill);
  return out;
}

absl::StatusOr<nlohmann::json> RunRouteOverhead(const RouteLiveOptions& o) {
  EXA_RETURN_IF_ERROR(ValidateLive(o));
  if (!o.gateway_addr.empty()) {
    return absl::InvalidArgumentError("route overhead starts its own node and gateway");
  }
  EXA_ASSIGN_OR_RETURN(Cluster cluster, StartCluster(o, 1, o.replicas_per_node));
  EXA_ASSIGN_OR_RETURN(auto gw, StartGateway(o, cluster, o.overhead_policy, 0));
  // The node's replica ids, from its load stream's first report.
  std::vector<std::string> replicas;
  {
    auto node = exaserve::v1::Node::NewStub(Channel(cluster.nodes[0]->grpc_target()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    exaserve::v1::WatchLoadRequest req;
    req.set_max_rate_hz(50);
    auto reader = node->WatchLoad(&ctx, req);
    exaserve::v1::LoadReport report;
    if (reader->Read(&report)) {
      for (const auto& r : report.replicas()) replicas.push_back(r.replica_id());
    }
    ctx.TryCancel();
    (void)reader->Finish();
  }
  if (replicas.empty()) return absl::InternalError("the node reported no replica");
  auto gw_stub = exaserve::v1::Inference::NewStub(Channel(gw->grpc_target()));
  auto node_stub = exaserve::v1::Node::NewStub(Channel(cluster.nodes[0]->grpc_target()));
  WorkItem item;
  item.prompt_tokens = o.overhead_prompt_tokens;
  item.output_tokens = o.overhead_max_tokens;
  item.max_tokens = o.overhead_max_tokens;
  const auto request = ToProto(Workload::PromptTokens(item, kLiveVocab), o.overhead_max_tokens);
  auto recorder = std::make_shared<Recorder>();
  Random coin(o.seed);
  const absl::Duration warmup = absl::Seconds(2);
  absl::Duration elapsed;
  Drive(
      PoissonGaps(o.overhead_rate, o.seed ^ 0x0EAD), absl::Seconds(o.overhead_duration_s) + warmup,
      [&](int64_t i) {
        auto* call = new StreamCall(recorder, absl::Seconds(o.call_timeout_s), elapsed >= warmup);
        if (coin.Bernoulli(0.5)) {
          call->StartGateway(*gw_stub, request);
        } else {
          exaserve::v1::NodeGenerateRequest direct;
          direct.set_replica_id(replicas[static_cast<size_t>(i) % replicas.size()]);
          *direct.mutable_request() = request;
          call->StartDirect(*node_stub, std::move(direct));
        }
      },
      [&](absl::Duration at) { elapsed = at; });
  std::vector<CallResult> results = recorder->Wait();
  gw->Stop();
  for (auto& n : cluster.nodes) n->Stop();
  std::vector<double> ttft[2], e2e[2];
  int64_t errors[2] = {0, 0};
  for (const CallResult& r : results) {
    if (!r.measured) continue;
    const int k = r.via_gateway ? 1 : 0;
    if (r.code != grpc::OK || !r.first_token) {
      errors[k]++;
      continue;
    }
    ttft[k].push_back(absl::ToDoubleMilliseconds(*r.first_token - r.start));
    e2e[k].push_back(absl::ToDoubleMilliseconds(r.end - r.start));
  }
  auto quantiles = [](const std::vector<double>& v) {
    return nlohmann::json{{"p50", Quantile(v, 0.5)}, {"p99", Quantile(v, 0.99)}};
  };
  auto added = [](const std::vector<double>& gw_v, const std::vector<double>& direct_v) {
    return nlohmann::json{{"p50", Quantile(gw_v, 0.5) - Quantile(direct_v, 0.5)},
                          {"p99", Quantile(gw_v, 0.99) - Quantile(direct_v, 0.99)}};
  };
  return nlohmann::json{
      {"mode", "overhead"},
      {"gateway_policy", o.overhead_policy},
      {"rate_requests_per_s", o.overhead_rate},
      {"duration_s", o.overhead_duration_s},
      {"replicas", replicas.size()},
      {"prompt_tokens", o.overhead_prompt_tokens},
      {"max_tokens", o.overhead_max_tokens},
      {"direct",
       {{"requests", ttft[0].size()},
        {"errors", errors[0]},
        {"ttft_ms", quantiles(ttft[0])},
        {"e2e_ms", quantiles(e2e[0])}}},
      {"gateway",
       {{"requests", ttft[1].size()},
        {"errors", errors[1]},
        {"ttft_ms", quantiles(ttft[1])},
        {"e2e_ms", quantiles(e2e[1])}}},
      {"added_ms", {{"ttft", added(ttft[1], ttft[0])}, {"e2e", added(e2e[1], e2e[0])}}},
      {"method",
       "one Poisson stream; each request at random through the gateway (Inference.Generate) or "
       "straight to a replica (Node.Generate, round-robin over the node's replicas), same node, "
       "same run; added = quantile via gateway - the same quantile direct"}};
}

}  // namespace exa::bench
