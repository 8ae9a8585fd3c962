#include "tools/soak_bench.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include "absl/synchronization/mutex.h"
#include "bench/route_workload.h"
#include "common/strings.h"
#include "net/http_client.h"

namespace exa::tools {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Runs `command` in a shell; its stdout, and its exit status in *rc.
std::string Shell(const std::string& command, int* rc) {
  std::string out;
  FILE* f = popen(command.c_str(), "r");
  if (f == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int status = pclose(f);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

int64_t RssKb(int pid) {
  std::ifstream in(StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

// Node index → pid, from the cluster script's n<i>.pid files.
std::map<int, int> Pids(const std::string& dir) {
  std::map<int, int> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 6 || name[0] != 'n' || !name.ends_with(".pid")) continue;
    int node = std::atoi(name.c_str() + 1);
    std::ifstream in(e.path());
    int pid = 0;
    if (node > 0 && (in >> pid) && pid > 0) out[node] = pid;
  }
  return out;
}

// Requests are also counted per window of the run (the timeline the docs plot).
constexpr double kWindowS = 10;

struct Window {
  int64_t answered = 0;  // right or wrong sum
  int64_t errors = 0;    // explicit, transport or unexplained
  int64_t hangs = 0;
  std::vector<double> latency_ms;
};

struct Tally {
  absl::Mutex mu;
  int64_t correct ABSL_GUARDED_BY(mu) = 0;
  int64_t wrong_answer ABSL_GUARDED_BY(mu) = 0;
  int64_t hangs ABSL_GUARDED_BY(mu) = 0;
  int64_t transport_errors ABSL_GUARDED_BY(mu) = 0;
  int64_t unexplained ABSL_GUARDED_BY(mu) = 0;
  std::map<int, int64_t> explicit_errors ABSL_GUARDED_BY(mu);  // HTTP status → count
  std::map<std::string, int64_t> transport_kinds ABSL_GUARDED_BY(mu);
  std::vector<double> latency_ms ABSL_GUARDED_BY(mu);
  std::vector<Window> windows ABSL_GUARDED_BY(mu);

  Window& WindowAt(double seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const auto i = static_cast<size_t>(std::max(0.0, seconds) / kWindowS);
    if (windows.size() <= i) windows.resize(i + 1);
    return windows[i];
  }
};

// Files one request's outcome: `a` + `b` is the right answer.
void Record(Tally& tally, const absl::StatusOr<net::HttpClientResponse>& r, int a, int b, double ms,
            double at_s) {
  absl::MutexLock l(&tally.mu);
  Window& w = tally.WindowAt(at_s);
  if (!r.ok()) {
    if (r.status().code() == absl::StatusCode::kDeadlineExceeded) {
      tally.hangs++;  // no answer within the request's deadline
      w.hangs++;
    } else {
      tally.transport_errors++;
      tally.transport_kinds[std::string(absl::StatusCodeToString(r.status().code()))]++;
      w.errors++;
    }
    return;
  }
  json body = json::parse(r->body, nullptr, false);
  if (r->status != 200) {
    if (body.is_object() && body.contains("error")) {
      tally.explicit_errors[r->status]++;
    } else {
      tally.unexplained++;
    }
    w.errors++;
    return;
  }
  std::string text;
  if (body.is_object() && body.contains("choices") && body["choices"].is_array() &&
      !body["choices"].empty()) {
    text = body["choices"][0].value("text", "");
  }
  if (text.rfind(std::to_string(a + b), 0) == 0) {
    tally.correct++;
  } else {
    tally.wrong_answer++;  // the tiny model's own accuracy, not a serving failure
  }
  tally.latency_ms.push_back(ms);
  w.answered++;
  w.latency_ms.push_back(ms);
}

// One client: a+b= prompts through the gateway, one at a time, until `end` or `stop`.
void SendRequests(const SoakOptions& o, int worker, boost::asio::io_context& io,
                  Clock::time_point start, Clock::time_point end, const std::atomic<bool>& stop,
                  Tally& tally) {
  std::mt19937_64 rng(o.seed * 1000 + static_cast<uint64_t>(worker));
  while (!stop.load() && Clock::now() < end) {
    const int a = static_cast<int>(rng() % 100), b = static_cast<int>(rng() % 100);
    const int max_tokens = 4 + static_cast<int>(rng() % 13);  // mixed lengths
    net::HttpClientRequest req;
    req.method = "POST";
    req.host = "127.0.0.1";
    req.port = static_cast<uint16_t>(o.base_port + 11);
    req.target = "/v1/completions";
    req.content_type = "application/json";
    req.body = json{
        {"model", "exa-tiny-arith"},
        {"prompt", StrCat(a, "+", b, "=")},
        {"max_tokens", max_tokens},
        {"temperature",
         0}}.dump();
    req.timeout = absl::Seconds(o.request_timeout_s);
    auto done = std::make_shared<std::promise<absl::StatusOr<net::HttpClientResponse>>>();
    auto future = done->get_future();
    const auto t0 = Clock::now();
    net::HttpFetch(io, req, [done](absl::StatusOr<net::HttpClientResponse> r) {
      done->set_value(std::move(r));
    });
    const double at_s = std::chrono::duration<double>(t0 - start).count();
    // The client's own deadline bounds the exchange; past it and a grace, the call is hung.
    if (future.wait_for(std::chrono::duration<double>(o.request_timeout_s + 10)) !=
        std::future_status::ready) {
      Record(tally, absl::DeadlineExceededError("no answer"), a, b, 0, at_s);
      continue;
    }
    const absl::StatusOr<net::HttpClientResponse> r = future.get();
    Record(tally, r, a, b, std::chrono::duration<double, std::milli>(Clock::now() - t0).count(),
           at_s);
  }
}

// Every `fault_every_s`, pauses a random inference node (never the gateway or the scheduler)
// for `pause_s`, or on odd rounds kills one (-9), at most `max_kills`; the faults injected.
json InjectFaults(const SoakOptions& o, const std::map<int, int>& pids, Clock::time_point start,
                  Clock::time_point end, const std::atomic<bool>& stop) {
  json faults = json::array();
  std::mt19937_64 rng(o.seed);
  std::vector<int> inference;
  for (const auto& [node, pid] : pids) {
    if (node >= 3) inference.push_back(node);
  }
  std::set<int> killed;
  int kills = 0;
  for (int round = 0; !inference.empty(); ++round) {
    const auto next = Clock::now() + std::chrono::duration<double>(o.fault_every_s);
    while (Clock::now() < next && Clock::now() < end && !stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (Clock::now() >= end || stop.load()) break;
    std::vector<int> alive;
    for (int n : inference) {
      if (!killed.count(n)) alive.push_back(n);
    }
    if (alive.empty()) break;
    const int node = alive[rng() % alive.size()];
    const int pid = pids.at(node);
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    if (round % 2 == 1 && kills < o.max_kills) {
      ::kill(pid, SIGKILL);
      killed.insert(node);
      kills++;
      faults.push_back({{"at_s", std::round(t)}, {"action", "kill -9"}, {"node", node}});
    } else {
      ::kill(pid, SIGSTOP);
      faults.push_back(
          {{"at_s", std::round(t)}, {"action", "pause"}, {"node", node}, {"seconds", o.pause_s}});
      const auto resume = Clock::now() + std::chrono::duration<double>(o.pause_s);
      while (Clock::now() < resume) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ::kill(pid, SIGCONT);
    }
  }
  return faults;
}

// Each node's resident memory at the start and now, and the growth (null: killed).
json MemoryReport(const std::map<int, int>& pids, const std::map<int, int64_t>& rss_start) {
  json memory = json::object();
  for (const auto& [node, pid] : pids) {
    const int64_t start_kb = rss_start.at(node);
    const int64_t now_kb = RssKb(pid);
    json m = {{"start_kb", start_kb}, {"end_kb", now_kb}};
    if (now_kb < 0) {
      m["end_kb"] = nullptr;  // killed
    } else if (start_kb > 0) {
      m["growth"] = std::round(1000.0 * (now_kb - start_kb) / start_kb) / 1000.0;
    }
    memory[StrCat("node-", node)] = m;
  }
  return memory;
}

// Per window: requests answered, errors and hangs, P99 latency, and each node's resident memory
// sampled at the window's end (`rss`: one map per window; null once a node is gone).
json Timeline(const Tally& tally, const std::vector<std::map<int, int64_t>>& rss)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(tally.mu) {
  json out = json::array();
  for (size_t i = 0; i < tally.windows.size(); ++i) {
    const Window& w = tally.windows[i];
    json row = {{"start_s", static_cast<double>(i) * kWindowS},
                {"answered", w.answered},
                {"errors", w.errors},
                {"hangs", w.hangs},
                {"latency_p99_ms", std::round(bench::Quantile(w.latency_ms, 0.99))}};
    if (i < rss.size()) {
      json mem = json::object();
      for (const auto& [node, kb] : rss[i]) {
        mem[StrCat("node-", node)] = kb < 0 ? json(nullptr) : json(kb);
      }
      row["rss_kb"] = mem;
    }
    out.push_back(row);
  }
  return out;
}

json Summary(const SoakOptions& o, Tally& tally, double ran_s)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(tally.mu) {
  int64_t explicit_total = 0;
  json explicit_errors = json::object();
  for (const auto& [code, n] : tally.explicit_errors) {
    explicit_errors[std::to_string(code)] = n;
    explicit_total += n;
  }
  const int64_t total = tally.correct + tally.wrong_answer + tally.hangs + tally.transport_errors +
                        tally.unexplained + explicit_total;
  json r;
  r["minutes"] = std::round(ran_s / 6) / 10;
  r["requests"] = {{"total", total},
                   {"answered_correctly", tally.correct},
                   {"answered_wrong_sum", tally.wrong_answer},
                   {"explicit_errors", explicit_errors},
                   {"transport_errors", tally.transport_errors},
                   {"transport_error_kinds", tally.transport_kinds},
                   {"unexplained_errors", tally.unexplained},
                   {"hangs", tally.hangs}};
  r["requests_per_s"] = std::round(10 * static_cast<double>(total) / ran_s) / 10;
  r["latency_ms"] = {{"p50", std::round(bench::Quantile(tally.latency_ms, 0.5))},
                     {"p99", std::round(bench::Quantile(tally.latency_ms, 0.99))},
                     {"max", std::round(bench::Quantile(tally.latency_ms, 1.0))}};
  // Every request ended in an answer or an explicit error; none hung.
  r["passed"] = tally.hangs == 0 && tally.unexplained == 0 && total > 0;
  return r;
}

}  // namespace

int RunSoak(const SoakOptions& o, json* out) {
  std::string work = o.work_dir;
  if (work.empty()) {
    char tmpl[] = "/tmp/exa-soak-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    work = tmpl;
  }
  const std::string env =
      StrCat("CLUSTER_DIR='", work, "' BASE_PORT=", o.base_port, " BIN='", o.bin_dir, "' ");
  int rc = 0;
  Shell(StrCat(env, o.script, " up ", o.nodes, " >'", work, "/up.log' 2>&1"), &rc);
  if (rc != 0) {
    std::fprintf(stderr, "exaserve-bench soak: the cluster did not start (%s/up.log)\n",
                 work.c_str());
    Shell(StrCat(env, o.script, " down >/dev/null 2>&1"), &rc);
    return 1;
  }
  const std::map<int, int> pids = Pids(work);
  std::map<int, int64_t> rss_start;
  for (const auto& [node, pid] : pids) rss_start[node] = RssKb(pid);

  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  std::vector<std::thread> io_threads;
  for (int i = 0; i < 2; ++i) io_threads.emplace_back([&io] { io.run(); });

  Tally tally;
  std::atomic<bool> stop{false};
  const auto start = Clock::now();
  const auto end = start + std::chrono::milliseconds(static_cast<int64_t>(o.minutes * 60000));
  std::vector<std::thread> workers;
  for (int w = 0; w < o.concurrency; ++w) {
    workers.emplace_back([&, w] { SendRequests(o, w, io, start, end, stop, tally); });
  }
  json faults;
  std::thread chaos([&] { faults = InjectFaults(o, pids, start, end, stop); });
  // Each node's resident memory at the end of every window.
  std::vector<std::map<int, int64_t>> rss;
  for (auto next = start + std::chrono::duration<double>(kWindowS); next <= end;
       next +=
       std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kWindowS))) {
    std::this_thread::sleep_until(next);
    std::map<int, int64_t>& sample = rss.emplace_back();
    for (const auto& [node, pid] : pids) sample[node] = RssKb(pid);
  }
  for (auto& t : workers) t.join();
  stop = true;
  chaos.join();
  const double ran_s = std::chrono::duration<double>(Clock::now() - start).count();

  json memory = MemoryReport(pids, rss_start);
  std::string alerts_text =
      Shell(StrCat("'", o.bin_dir, "/exaserve-cli' --addr 127.0.0.1:", o.base_port + 10,
                   " --json alerts 2>/dev/null"),
            &rc);
  json alerts = json::parse(alerts_text, nullptr, false);
  Shell(StrCat(env, o.script, " down >/dev/null 2>&1"), &rc);
  guard.reset();
  io.stop();
  for (auto& t : io_threads) t.join();

  absl::MutexLock l(&tally.mu);
  json& r = *out;
  r = Summary(o, tally, ran_s);
  r["cluster"] = {{"nodes", o.nodes},
                  {"inference_nodes", o.nodes - 2},
                  {"concurrency", o.concurrency},
                  {"work_dir", work}};
  r["faults"] = faults;
  r["memory"] = memory;
  r["alerts"] = alerts.is_discarded() ? json(alerts_text) : alerts;
  r["timeline"] = Timeline(tally, rss);
  return 0;
}

}  // namespace exa::tools
