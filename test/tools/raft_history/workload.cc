#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "raft_history/history.h"
#include "raft_history/spec_client.h"
#include "raft_history/workload.h"

namespace exa::raft_history {
namespace {

using json = nlohmann::json;

// A node whose last call failed or timed out is avoided this long by that client (when another
// is connected), so a dead or paused node does not pile up unknown writes, which only widen the
// checker's search without testing anything new.
constexpr int64_t kAvoidNanos = 2'000'000'000;

struct Tally {
  std::map<std::string, size_t> by_outcome;                      // "put ok", "read fail", ...
  std::map<std::string, std::map<std::string, size_t>> by_node;  // node → outcome → count
};

class Clients {
 public:
  Clients(const RunOptions& options, HistoryWriter* writer)
      : options_(options), writer_(writer), base_(static_cast<uint64_t>(MonotonicNanos())) {
    for (const std::string& a : options_.addresses) {
      nodes_.push_back(std::make_unique<SpecClient>(a, options_.deadline));
    }
  }

  void Run(int client);
  json Summary();

 private:
  size_t PickNode(std::mt19937_64& rng, const std::vector<int64_t>& avoid_until);
  CallResult Call(OpKind kind, SpecClient& node, const std::string& key, const std::string& value);
  void Count(OpKind kind, const std::string& node, Outcome outcome);

  const RunOptions& options_;
  HistoryWriter* writer_;
  // Operation ids and values are unique across the processes writing one history: ids start at
  // this process's start time in nanoseconds, values carry it.
  const uint64_t base_;
  std::atomic<uint64_t> next_op_{0};
  std::vector<std::unique_ptr<SpecClient>> nodes_;
  absl::Mutex mu_;
  Tally tally_ ABSL_GUARDED_BY(mu_);
};

size_t Clients::PickNode(std::mt19937_64& rng, const std::vector<int64_t>& avoid_until) {
  const int64_t now = MonotonicNanos();
  std::vector<size_t> good;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (avoid_until[i] <= now && nodes_[i]->Connected()) good.push_back(i);
  }
  if (good.empty()) return std::uniform_int_distribution<size_t>(0, nodes_.size() - 1)(rng);
  return good[std::uniform_int_distribution<size_t>(0, good.size() - 1)(rng)];
}

CallResult Clients::Call(OpKind kind, SpecClient& node, const std::string& key,
                         const std::string& value) {
  switch (kind) {
    case OpKind::kPut:
      return node.Put(key, value);
    case OpKind::kDelete:
      return node.Delete(key);
    case OpKind::kRead:
      break;
  }
  return node.Read(key);
}

void Clients::Count(OpKind kind, const std::string& node, Outcome outcome) {
  const std::string what = absl::StrCat(OpKindName(kind), " ", OutcomeName(outcome));
  absl::MutexLock lock(&mu_);
  tally_.by_outcome[what]++;
  tally_.by_node[node][OutcomeName(outcome)]++;
}

void Clients::Run(int client) {
  std::mt19937_64 rng(options_.seed * 1'000'003 + static_cast<uint64_t>(client));
  std::uniform_real_distribution<double> unit(0, 1);
  std::uniform_int_distribution<size_t> key_of(0, options_.keys.size() - 1);
  std::exponential_distribution<double> gap(
      1.0 / std::max(1.0, absl::ToDoubleMilliseconds(options_.pause)));
  std::vector<int64_t> avoid_until(nodes_.size(), 0);
  const int64_t end = MonotonicNanos() + absl::ToInt64Nanoseconds(options_.duration);
  for (uint64_t seq = 0; MonotonicNanos() < end; ++seq) {
    const double r = unit(rng);
    Invocation inv;
    inv.op = base_ + next_op_.fetch_add(1);
    inv.client = client;
    inv.kind = r < options_.read_fraction                              ? OpKind::kRead
               : r < options_.read_fraction + options_.delete_fraction ? OpKind::kDelete
                                                                       : OpKind::kPut;
    inv.key = options_.keys[key_of(rng)];
    if (inv.kind == OpKind::kPut)
      inv.value = absl::StrCat("v", base_ % 1'000'000'007, "-", client, "-", seq);
    const size_t n = PickNode(rng, avoid_until);
    inv.node = nodes_[n]->address();
    inv.time_ns = MonotonicNanos();
    writer_->Invoke(inv);
    CallResult result = Call(inv.kind, *nodes_[n], inv.key, inv.value);
    Completion done;
    done.op = inv.op;
    done.time_ns = MonotonicNanos();
    done.outcome = result.outcome;
    done.value = result.value;
    done.version = result.version;
    done.error = result.error;
    writer_->Complete(done);
    Count(inv.kind, inv.node, result.outcome);
    if (result.outcome != Outcome::kOk) avoid_until[n] = done.time_ns + kAvoidNanos;
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(gap(rng) * 1000)));
  }
}

json Clients::Summary() {
  absl::MutexLock lock(&mu_);
  size_t total = 0;
  for (const auto& [what, n] : tally_.by_outcome) total += n;
  return json{{"operations", total},
              {"by_outcome", tally_.by_outcome},
              {"by_node", tally_.by_node},
              {"clients", options_.clients},
              {"seconds", absl::ToDoubleSeconds(options_.duration)}};
}

}  // namespace

absl::StatusOr<json> RunClients(const RunOptions& options) {
  if (options.addresses.empty() || options.keys.empty() || options.clients < 1) {
    return absl::InvalidArgumentError("run: needs at least one address, one key and one client");
  }
  absl::StatusOr<std::unique_ptr<HistoryWriter>> writer = HistoryWriter::Open(options.history);
  if (!writer.ok()) return writer.status();
  Clients clients(options, writer->get());
  std::vector<std::thread> threads;
  for (int c = 0; c < options.clients; ++c) threads.emplace_back([&clients, c] { clients.Run(c); });
  for (std::thread& t : threads) t.join();
  return clients.Summary();
}

absl::StatusOr<json> FinalReads(const FinalOptions& options) {
  absl::StatusOr<std::unique_ptr<HistoryWriter>> writer = HistoryWriter::Open(options.history);
  if (!writer.ok()) return writer.status();
  uint64_t op = static_cast<uint64_t>(MonotonicNanos());
  size_t answered = 0, attempts = 0;
  std::vector<std::string> missing;
  for (const std::string& address : options.addresses) {
    SpecClient node(address, options.deadline);
    for (const std::string& key : options.keys) {
      const int64_t give_up = MonotonicNanos() + absl::ToInt64Nanoseconds(options.retry_for);
      bool ok = false;
      while (!ok && MonotonicNanos() < give_up) {
        Invocation inv{op++, -1, OpKind::kRead, key, "", address, true, MonotonicNanos()};
        (*writer)->Invoke(inv);
        CallResult r = node.Read(key);
        (*writer)->Complete({inv.op, r.outcome, r.value, r.version, r.error, MonotonicNanos()});
        ++attempts;
        ok = r.outcome == Outcome::kOk;
        if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // then ask again
      }
      if (ok) {
        ++answered;
      } else {
        missing.push_back(absl::StrCat(address, " ", key));
      }
    }
  }
  if (!missing.empty()) {
    return absl::UnavailableError(absl::StrCat("no final read answered for ", missing.size(),
                                               " (node, key) pairs, e.g. ", missing.front()));
  }
  return json{{"final_reads", answered}, {"attempts", attempts}};
}

}  // namespace exa::raft_history
