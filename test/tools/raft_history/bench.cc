// The latency and fail-over bench of the spec store (docs/perf/raft.md): plain sequential
// applies, one at a time, so each figure is one write's round trip through Raft.
#include <signal.h>

#include <algorithm>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "raft_history/history.h"
#include "raft_history/spec_client.h"
#include "raft_history/workload.h"

namespace exa::raft_history {
namespace {

using json = nlohmann::json;

constexpr char kBenchKey[] = "raft-bench";

double Percentile(std::vector<double> sorted, double p) {
  if (sorted.empty()) return 0;
  std::sort(sorted.begin(), sorted.end());
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

std::string UniqueValue() { return absl::StrCat("b", MonotonicNanos()); }

// Writes through the nodes in turn until one acknowledges; the milliseconds that took.
absl::StatusOr<double> WriteUntilOk(std::vector<std::unique_ptr<SpecClient>>& clients,
                                    absl::Duration within, int* attempts) {
  const int64_t start = MonotonicNanos();
  const int64_t give_up = start + absl::ToInt64Nanoseconds(within);
  std::string last_error;
  for (size_t i = 0; MonotonicNanos() < give_up; i = (i + 1) % clients.size()) {
    ++*attempts;
    CallResult r = clients[i]->Put(kBenchKey, UniqueValue());
    if (r.outcome == Outcome::kOk) return (MonotonicNanos() - start) / 1e6;
    last_error = absl::StrCat(clients[i]->address(), ": ", r.error);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a refused call is instant
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "no write acknowledged within ", absl::FormatDuration(within), "; last: ", last_error));
}

// The leader's id once every node names the same one (its state then has the bench key).
absl::StatusOr<std::string> AgreedLeader(const BenchOptions& options) {
  std::vector<std::unique_ptr<SpecClient>> clients;
  for (const BenchNode& n : options.nodes) {
    clients.push_back(std::make_unique<SpecClient>(n.address, options.deadline));
  }
  int attempts = 0;
  absl::StatusOr<double> written = WriteUntilOk(clients, options.settle, &attempts);
  if (!written.ok()) return written.status();
  const int64_t give_up = MonotonicNanos() + absl::ToInt64Nanoseconds(options.settle);
  std::string last;
  while (MonotonicNanos() < give_up) {
    std::set<std::string> named;
    for (auto& c : clients) {
      absl::StatusOr<std::string> leader = c->Leader(kBenchKey);
      named.insert(leader.ok() ? *leader : "");
    }
    last = absl::StrJoin(named, ",");
    if (named.size() == 1 && !named.begin()->empty()) {
      for (const BenchNode& n : options.nodes) {
        if (n.id == *named.begin()) return n.id;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the next reconcile step
  }
  return absl::DeadlineExceededError(
      absl::StrCat("the schedulers named no common leader among the nodes given within ",
                   absl::FormatDuration(options.settle), " (named: ", last, ")"));
}

json Sequential(SpecClient& client, int applies) {
  std::vector<double> ms;
  int failed = 0;
  const int64_t start = MonotonicNanos();
  for (int i = 0; i < applies; ++i) {
    const int64_t t0 = MonotonicNanos();
    CallResult r = client.Put(kBenchKey, UniqueValue());
    if (r.outcome == Outcome::kOk) {
      ms.push_back((MonotonicNanos() - t0) / 1e6);
    } else {
      ++failed;
    }
  }
  const double seconds = (MonotonicNanos() - start) / 1e9;
  double sum = 0;
  for (double x : ms) sum += x;
  return json{{"applies", applies},
              {"acknowledged", ms.size()},
              {"failed", failed},
              {"p50_ms", Percentile(ms, 50)},
              {"p99_ms", Percentile(ms, 99)},
              {"mean_ms", ms.empty() ? 0 : sum / static_cast<double>(ms.size())},
              {"max_ms", ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end())},
              {"applies_per_second", seconds > 0 ? static_cast<double>(ms.size()) / seconds : 0}};
}

}  // namespace

absl::StatusOr<json> BenchLatency(const BenchOptions& options) {
  if (options.nodes.size() < 2) return absl::InvalidArgumentError("bench: needs 2 nodes or more");
  absl::StatusOr<std::string> leader = AgreedLeader(options);
  if (!leader.ok()) return leader.status();
  const BenchNode* lead = nullptr;
  const BenchNode* follower = nullptr;
  for (const BenchNode& n : options.nodes) {
    if (n.id == *leader) {
      lead = &n;
    } else if (follower == nullptr) {
      follower = &n;
    }
  }
  SpecClient to_leader(lead->address, options.deadline);
  SpecClient to_follower(follower->address, options.deadline);
  json leader_figures = Sequential(to_leader, options.applies);
  json follower_figures = Sequential(to_follower, options.applies);
  return json{{"schedulers", options.nodes.size()},
              {"leader", lead->id},
              {"follower", follower->id},
              {"through_leader", leader_figures},
              {"through_follower", follower_figures}};
}

absl::StatusOr<json> BenchFailover(const BenchOptions& options) {
  if (options.nodes.size() < 3)
    return absl::InvalidArgumentError("failover: needs 3 nodes or more");
  absl::StatusOr<std::string> leader = AgreedLeader(options);
  if (!leader.ok()) return leader.status();
  std::vector<std::unique_ptr<SpecClient>> survivors;
  int pid = 0;
  for (const BenchNode& n : options.nodes) {
    if (n.id == *leader) {
      pid = n.pid;
    } else {
      survivors.push_back(std::make_unique<SpecClient>(n.address, absl::Seconds(2)));
    }
  }
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("no pid given for ", *leader));
  for (auto& s : survivors) s->Connected();  // connect before the clock starts
  if (::kill(pid, SIGKILL) != 0) {
    return absl::InternalError(absl::StrCat("kill -9 ", pid, " (", *leader, ") failed"));
  }
  int attempts = 0;
  absl::StatusOr<double> ms = WriteUntilOk(survivors, options.settle, &attempts);
  if (!ms.ok()) return ms.status();
  return json{{"schedulers", options.nodes.size()},
              {"killed", *leader},
              {"pid", pid},
              {"failover_ms", *ms},
              {"attempts", attempts}};
}

}  // namespace exa::raft_history
