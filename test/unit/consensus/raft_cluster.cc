#include "unit/consensus/raft_cluster.h"

#include "consensus/raft_c.h"

#include <deque>

#include "absl/strings/str_cat.h"

namespace exa::consensus::testing {
namespace {

using exa::testing::KvOperation;

struct Node {
  std::string name;
  MemoryLogStorage storage;
  std::unique_ptr<KvState> kv;
  std::unique_ptr<RaftNode> raft;
  bool up = true;
  absl::Time paused_until = absl::InfinitePast();
};

struct InFlight {
  absl::Time deliver_at;
  std::string from;
  std::string to;
  std::string bytes;
};

struct Pending {
  int client = 0;
  std::string node;
  uint64_t ticket = 0;
  absl::Time deadline;
  KvOperation op;
};

class Cluster {
 public:
  explicit Cluster(const ClusterOptions& options) : options_(options), rng_(options.seed) {
    for (int i = 0; i < options.nodes; ++i) names_.push_back(absl::StrCat("s", i + 1));
    for (const std::string& name : names_) {
      auto node = std::make_unique<Node>();
      node->name = name;
      nodes_[name] = std::move(node);
      Boot(*nodes_[name]);
    }
    believed_leader_.assign(static_cast<size_t>(options.clients), names_[0]);
    busy_.assign(static_cast<size_t>(options.clients), false);
    last_version_.assign(static_cast<size_t>(options.clients), std::map<std::string, uint64_t>{});
  }

  ClusterReport Run();

 private:
  void Boot(Node& node) {
    node.kv = std::make_unique<KvState>();
    RaftOptions o;
    o.self = node.name;
    o.snapshot_threshold = options_.snapshot_threshold;
    o.snapshot_trailing = options_.snapshot_trailing;
    o.seed = options_.seed * 1000 + static_cast<uint64_t>(restarts_++);
    auto raft = RaftNode::Start(o, &node.storage, node.kv.get(), now_, names_);
    if (!raft.ok()) std::abort();
    node.raft = std::move(*raft);
    node.up = true;
  }
  void Crash(Node& node) {
    FailPendingOn(node.name);
    node.raft.reset();
    node.kv.reset();
    node.up = false;
  }
  bool Running(const Node& node) const { return node.up && now_ >= node.paused_until; }
  bool Cut(const std::string& a, const std::string& b) const {
    return cut_.count({a, b}) > 0 || cut_.count({b, a}) > 0;
  }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  int64_t Stamp() { return ++clock_; }  // history time: strictly increasing

  void Deliver();
  void Collect(Node& node);
  // One millisecond: messages due are delivered, every running node ticks and sends; with
  // `harvest`, the clients' completions are taken too.
  void Step(bool harvest);
  // Every node up, running and connected.
  void HealAll();
  // Ends as unknown every pending operation `done` picks.
  template <typename Pred>
  void FinishUnknown(Pred done);
  void Nemesis();
  void StartOps();
  void StartOp(int client);
  void Harvest(Node& node);
  void Finish(Pending& p, Outcome outcome, const std::string& result_bytes, uint64_t index);
  void FailPendingOn(const std::string& node);
  void Expire();
  std::string LeaderName() const;
  void FinalReads(ClusterReport& report);

  ClusterOptions options_;
  std::mt19937_64 rng_;
  absl::Time now_ = absl::FromUnixSeconds(1'700'000'000);
  int64_t clock_ = 0;
  int restarts_ = 0;
  std::vector<std::string> names_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  std::deque<InFlight> network_;
  std::set<std::pair<std::string, std::string>> cut_;
  absl::Time heal_at_ = absl::InfinitePast();
  absl::Time quiet_until_ = absl::InfinitePast();
  std::map<std::string, absl::Time> restart_at_;
  std::vector<std::string> believed_leader_;
  std::vector<bool> busy_;
  std::vector<std::map<std::string, uint64_t>> last_version_;
  std::vector<Pending> pending_;
  std::string last_leader_;
  int value_seq_ = 0;
  ClusterReport report_;
};

void Cluster::Collect(Node& node) {
  for (Outgoing& m : node.raft->TakeMessages()) {
    if (Chance(options_.drop_rate)) continue;
    network_.push_back(
        {now_ + absl::Milliseconds(Uniform(1, 8)), node.name, m.to, std::move(m.bytes)});
  }
}

void Cluster::Deliver() {
  std::deque<InFlight> later;
  while (!network_.empty()) {
    InFlight m = std::move(network_.front());
    network_.pop_front();
    auto it = nodes_.find(m.to);
    if (it == nodes_.end() || !it->second->up || Cut(m.from, m.to)) continue;  // lost
    if (m.deliver_at > now_ || !Running(*it->second)) {
      later.push_back(std::move(m));  // a paused node reads its socket when it resumes
      continue;
    }
    if (!it->second->raft->Receive(now_, m.bytes).ok()) std::abort();
  }
  network_ = std::move(later);
}

std::string Cluster::LeaderName() const {
  for (const auto& [name, node] : nodes_) {
    if (Running(*node) && node->raft->IsLeader()) return name;
  }
  return "";
}

// One fault at a time, as a Jepsen nemesis runs them: inject, hold, heal, stay quiet a while.
void Cluster::Nemesis() {
  if (!options_.faults) return;
  for (auto it = restart_at_.begin(); it != restart_at_.end();) {
    if (now_ < it->second) {
      ++it;
      continue;
    }
    Boot(*nodes_[it->first]);
    it = restart_at_.erase(it);
  }
  if (now_ >= heal_at_) cut_.clear();
  bool paused = false;
  for (const auto& [name, node] : nodes_) paused = paused || now_ < node->paused_until;
  if (!restart_at_.empty() || !cut_.empty() || paused) {
    quiet_until_ = now_ + absl::Milliseconds(Uniform(300, 1500));
    return;
  }
  if (now_ < quiet_until_) return;
  std::string leader = LeaderName();
  std::string victim =
      Chance(0.5) && !leader.empty() ? leader : names_[Uniform(0, options_.nodes - 1)];
  absl::Duration hold = absl::Milliseconds(Uniform(200, 3000));
  switch (Uniform(0, 3)) {
    case 0:
      Crash(*nodes_[victim]);
      restart_at_[victim] = now_ + hold;
      ++report_.crashes;
      break;
    case 1:    // the victim alone on one side
    case 2: {  // a minority with the victim (2 of 5, or 1 of 3) against the rest
      std::set<std::string> minority = {victim};
      while (minority.size() < static_cast<size_t>((options_.nodes - 1) / 2) && Chance(0.7)) {
        minority.insert(names_[Uniform(0, options_.nodes - 1)]);
      }
      for (const std::string& a : minority) {
        for (const std::string& b : names_) {
          if (minority.count(b) == 0) cut_.insert({a, b});
        }
      }
      heal_at_ = now_ + hold;
      ++report_.partitions;
      break;
    }
    default:
      nodes_[victim]->paused_until = now_ + hold;
      ++report_.pauses;
      break;
  }
}

void Cluster::StartOps() {
  for (int c = 0; c < options_.clients; ++c) {
    if (!busy_[static_cast<size_t>(c)] && Chance(0.05)) StartOp(c);
  }
}

void Cluster::StartOp(int client) {
  size_t c = static_cast<size_t>(client);
  KvOperation op;
  op.key = absl::StrCat("k", Uniform(1, options_.keys));
  int dice = Uniform(0, 99);
  op.kind = dice < 35   ? KvOperation::Kind::kRead
            : dice < 85 ? KvOperation::Kind::kPut
                        : KvOperation::Kind::kDelete;
  if (op.kind != KvOperation::Kind::kRead && Chance(0.5)) {
    auto seen = last_version_[c].find(op.key);
    op.expected_version = seen == last_version_[c].end() ? 0 : seen->second;
  }
  if (op.kind == KvOperation::Kind::kPut) op.value = absl::StrCat("v", ++value_seq_);
  std::string target = Chance(0.8) ? believed_leader_[c] : names_[Uniform(0, options_.nodes - 1)];
  Node& node = *nodes_[target];
  if (!Running(node)) {
    believed_leader_[c] = names_[Uniform(0, options_.nodes - 1)];
    return;  // connection refused: nothing happened
  }
  op.invoke = Stamp();
  if (op.kind == KvOperation::Kind::kRead && options_.stale_reads) {
    const KvRecord* r = node.kv->Get(op.key);
    if (r != nullptr) op.value = r->value;
    op.version = r != nullptr ? r->version : 0;
    op.response = Stamp();
    report_.history.push_back(op);
    ++report_.ok_reads;
    return;
  }
  absl::StatusOr<uint64_t> ticket;
  if (op.kind == KvOperation::Kind::kRead) {
    ticket = node.raft->Barrier(now_);
  } else {
    KvCommand command;
    command.request_id = absl::StrCat("c", client, "-", op.invoke);
    command.ops.push_back({op.key, op.value, op.expected_version});
    ticket = node.raft->Propose(now_, EncodeKvCommand(command));
  }
  if (!ticket.ok()) {  // not the leader: refused, never applied
    std::string leader = node.raft->Leader();
    believed_leader_[c] = leader.empty() ? names_[Uniform(0, options_.nodes - 1)] : leader;
    return;
  }
  busy_[c] = true;
  pending_.push_back({client, target, *ticket, now_ + absl::Seconds(3), op});
  Collect(node);
}

void Cluster::Finish(Pending& p, Outcome outcome, const std::string& result_bytes, uint64_t index) {
  busy_[static_cast<size_t>(p.client)] = false;
  KvOperation op = p.op;
  op.response = Stamp();
  if (outcome == Outcome::kNotApplied) return;
  if (outcome == Outcome::kUnknown) {
    if (op.kind == KvOperation::Kind::kRead) return;  // an unanswered read tells nothing
    op.unknown = true;
    ++report_.unknown;
    report_.history.push_back(op);
    return;
  }
  auto& seen = last_version_[static_cast<size_t>(p.client)];
  if (op.kind == KvOperation::Kind::kRead) {
    const KvRecord* r = nodes_[p.node]->kv->Get(op.key);
    if (r != nullptr) op.value = r->value;
    op.version = r != nullptr ? r->version : 0;
    seen[op.key] = op.version;
    ++report_.ok_reads;
  } else {
    absl::StatusOr<KvResult> result = DecodeKvResult(result_bytes);
    if (!result.ok()) std::abort();
    if (!result->ok && result->conflict_key.empty()) return;  // refused by a limit
    op.conflict = !result->ok;
    op.version = result->ok ? index : 0;
    if (result->ok) {
      seen[op.key] = op.kind == KvOperation::Kind::kPut ? index : 0;
      ++report_.ok_writes;
    } else {
      seen[op.key] = result->actual_version;
    }
  }
  report_.history.push_back(op);
}

void Cluster::Harvest(Node& node) {
  for (const Completion& c : node.raft->TakeCompletions()) {
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].node != node.name || pending_[i].ticket != c.ticket) continue;
      Finish(pending_[i], c.outcome, c.result, c.index);
      pending_.erase(pending_.begin() + static_cast<ptrdiff_t>(i));
      break;
    }
  }
}

template <typename Pred>
void Cluster::FinishUnknown(Pred done) {
  for (size_t i = 0; i < pending_.size();) {
    if (done(pending_[i])) {
      Finish(pending_[i], Outcome::kUnknown, "", 0);
      pending_.erase(pending_.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

void Cluster::FailPendingOn(const std::string& name) {
  FinishUnknown([&](const Pending& p) { return p.node == name; });
}

void Cluster::Expire() {
  FinishUnknown([&](const Pending& p) { return now_ >= p.deadline; });
}

void Cluster::HealAll() {
  cut_.clear();
  for (const std::string& name : names_) {
    Node& node = *nodes_[name];
    node.paused_until = absl::InfinitePast();
    if (!node.up) Boot(node);
  }
  restart_at_.clear();
}

void Cluster::Step(bool harvest) {
  now_ += absl::Milliseconds(1);
  Deliver();
  for (auto& [name, node] : nodes_) {
    if (!Running(*node)) continue;
    node->raft->Tick(now_);
    Collect(*node);
    if (harvest) Harvest(*node);
  }
}

void Cluster::FinalReads(ClusterReport& report) {
  for (int k = 1; k <= options_.keys; ++k) {
    std::string key = absl::StrCat("k", k);
    for (int attempt = 0; attempt < 5000; ++attempt) {
      Step(true);
      std::string leader = LeaderName();
      if (leader.empty()) continue;
      Node& node = *nodes_[leader];
      KvOperation op;
      op.kind = KvOperation::Kind::kRead;
      op.key = key;
      op.invoke = Stamp();
      absl::StatusOr<uint64_t> ticket = node.raft->Barrier(now_);
      if (!ticket.ok()) continue;
      bool done = false;
      for (int wait = 0; wait < 1000 && !done; ++wait) {
        Step(false);  // the read's barrier completes on `node`, taken below
        for (const Completion& c : node.raft->TakeCompletions()) {
          if (c.ticket != *ticket || c.outcome != Outcome::kApplied) continue;
          const KvRecord* r = node.kv->Get(key);
          if (r != nullptr) op.value = r->value;
          op.version = r != nullptr ? r->version : 0;
          op.response = Stamp();
          report.history.push_back(op);
          done = true;
        }
      }
      if (done) break;
    }
  }
}

ClusterReport Cluster::Run() {
  absl::Time end = now_ + options_.duration;
  while (now_ < end || !pending_.empty()) {
    if (now_ < end) Nemesis();
    if (now_ >= end) HealAll();  // and let the stragglers finish
    Step(true);
    std::string leader = LeaderName();
    if (!leader.empty() && leader != last_leader_) {
      if (!last_leader_.empty()) ++report_.leader_changes;
      last_leader_ = leader;
    }
    if (now_ < end) StartOps();
    Expire();
  }
  HealAll();  // the last step's nemesis may have struck
  FinalReads(report_);
  // Convergence: with every node up and connected, the logs and the states agree.
  for (int ms = 0; ms < 8000; ++ms) Step(true);
  report_.converged = true;
  const Node& first = *nodes_[names_[0]];
  for (const auto& [name, node] : nodes_) {
    if (node->kv->records() != first.kv->records()) {
      report_.converged = false;
      report_.divergence = absl::StrCat(
          name, " holds ", node->kv->records().size(), " records at ", node->raft->LastApplied(),
          ", ", first.name, " ", first.kv->records().size(), " at ", first.raft->LastApplied());
    }
  }
  return std::move(report_);
}

}  // namespace

ClusterReport RunCluster(const ClusterOptions& options) { return Cluster(options).Run(); }

}  // namespace exa::consensus::testing
