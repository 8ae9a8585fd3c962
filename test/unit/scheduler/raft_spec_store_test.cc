#include "scheduler/raft_spec_store.h"

#include <catch2/catch.hpp>
#include <deque>
#include <map>
#include <memory>

namespace exa::scheduler {
namespace {

// Scheduler stores over a lossless simulated network, 2 ms a hop, 1 ms steps.
struct Net {
  struct Node {
    std::unique_ptr<consensus::MemoryLogStorage> storage;
    std::unique_ptr<RaftSpecStore> store;
    bool up = true;
    std::vector<WriteOutcome> outcomes;
  };
  struct InFlight {
    absl::Time at;
    std::string from, to, bytes;
  };
  absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  std::map<std::string, Node> nodes;
  std::deque<InFlight> wire;
  std::set<std::string> dead;
  std::map<std::string, std::vector<std::string>> views;  // a node's own scheduler set, if set

  void Add(const std::string& id) {
    Node& n = nodes[id];
    if (!n.storage) n.storage = std::make_unique<consensus::MemoryLogStorage>();
    n.store = std::make_unique<RaftSpecStore>(id, n.storage.get());
    REQUIRE(n.store->Open(now).ok());
    n.up = true;
  }
  void Crash(const std::string& id) {
    nodes[id].store.reset();
    nodes[id].up = false;
  }
  void Run(absl::Duration d) {
    absl::Time end = now + d;
    while (now < end) {
      now += absl::Milliseconds(1);
      std::vector<std::string> live, gone(dead.begin(), dead.end());
      for (auto& [id, n] : nodes) {
        if (n.up) live.push_back(id);
      }
      for (auto& [id, n] : nodes) {
        if (!n.up) continue;
        auto view = views.find(id);
        n.store->SetMembers(now, view != views.end() ? view->second : live, gone);
        n.store->Tick(now);
      }
      std::deque<InFlight> later;
      for (InFlight& m : wire) {
        if (m.at > now) {
          later.push_back(std::move(m));
          continue;
        }
        auto it = nodes.find(m.to);
        if (it != nodes.end() && it->second.up) {
          REQUIRE(it->second.store->Handle(now, m.from, m.bytes).ok());
        }
      }
      wire = std::move(later);
      for (auto& [id, n] : nodes) {
        if (!n.up) continue;
        for (StoreFrame& f : n.store->TakeFrames()) {
          wire.push_back({now + absl::Milliseconds(2), id, f.to, std::move(f.bytes)});
        }
        for (WriteOutcome& o : n.store->TakeOutcomes()) n.outcomes.push_back(std::move(o));
      }
    }
  }
  std::string Leader() {
    for (auto& [id, n] : nodes) {
      if (n.up && n.store->ReadyToLead()) return id;
    }
    return "";
  }
};

TEST_CASE("schedulers bootstrap one raft cluster, forward writes to the leader and agree") {
  Net net;
  for (const char* id : {"a", "b", "c"}) net.Add(id);
  net.Run(absl::Seconds(4));
  REQUIRE(net.Leader() == "a");  // the lowest id bootstraps
  CHECK(net.nodes["a"].store->Configuration().size() == 3);

  std::optional<uint64_t> id = net.nodes["c"].store->Put(net.now, "spec/x", "one");
  REQUIRE(id);
  net.Run(absl::Milliseconds(500));  // followers learn the commit with the next heartbeat
  REQUIRE(net.nodes["c"].outcomes.size() == 1);
  CHECK(net.nodes["c"].outcomes[0].ok);
  uint64_t version = net.nodes["c"].outcomes[0].version;
  for (const char* n : {"a", "b", "c"}) {
    const StoreRecord* r = net.nodes[n].store->Get("spec/x");
    INFO(n << " applied " << net.nodes[n].store->AppliedIndex() << ", version " << version);
    REQUIRE(r != nullptr);
    CHECK(r->value == "one");
    CHECK(static_cast<uint64_t>(r->version.hlc.wall_us) == version);
  }

  // A stale expected version is refused with both versions named.
  net.nodes["b"].store->Put(net.now, "spec/x", "two", version - 1);
  net.Run(absl::Milliseconds(200));
  REQUIRE(net.nodes["b"].outcomes.size() == 1);
  CHECK_FALSE(net.nodes["b"].outcomes[0].ok);
  CHECK(net.nodes["b"].outcomes[0].error.find(std::to_string(version)) != std::string::npos);
  // The conflict comes back as such, from the leader to the follower that forwarded it too.
  CHECK(net.nodes["b"].outcomes[0].conflict == VersionConflict{"spec/x", version - 1, version});
  net.nodes["a"].store->Put(net.now, "spec/x", "two", version + 5);
  net.Run(absl::Milliseconds(200));
  REQUIRE(net.nodes["a"].outcomes.size() == 1);
  CHECK(net.nodes["a"].outcomes[0].conflict == VersionConflict{"spec/x", version + 5, version});

  // A transaction is refused whole: the unconditional op beside a stale one is not applied.
  net.nodes["c"].store->Transact(
      net.now, {{"spec/y", "new", std::nullopt}, {"spec/x", std::nullopt, version - 1}});
  net.Run(absl::Milliseconds(200));
  REQUIRE(net.nodes["c"].outcomes.size() == 2);
  CHECK(net.nodes["c"].outcomes[1].conflict == VersionConflict{"spec/x", version - 1, version});
  CHECK(net.nodes["c"].store->Get("spec/y") == nullptr);
  CHECK(net.nodes["c"].store->Get("spec/x") != nullptr);
  // With the current version both apply at one index; other refusals carry no conflict.
  net.nodes["c"].store->Transact(net.now,
                                 {{"spec/y", "new", 0}, {"spec/x", std::nullopt, version}});
  net.Run(absl::Milliseconds(500));
  REQUIRE(net.nodes["c"].outcomes.size() == 3);
  CHECK(net.nodes["c"].outcomes[2].ok);
  CHECK_FALSE(net.nodes["c"].outcomes[2].conflict);
  CHECK(net.nodes["c"].store->Get("spec/x") == nullptr);
  REQUIRE(net.nodes["c"].store->Get("spec/y") != nullptr);
  CHECK(static_cast<uint64_t>(net.nodes["c"].store->Get("spec/y")->version.hlc.wall_us) ==
        net.nodes["c"].outcomes[2].version);
}

TEST_CASE("a read index on a follower sees every write acknowledged before it") {
  Net net;
  for (const char* id : {"a", "b", "c"}) net.Add(id);
  net.Run(absl::Seconds(4));
  REQUIRE(net.Leader() == "a");
  net.nodes["a"].store->Put(net.now, "spec/z", "fresh");
  net.Run(absl::Milliseconds(10));  // acknowledged on the leader; b may not have applied it yet
  REQUIRE(net.nodes["a"].outcomes.size() == 1);
  std::optional<uint64_t> read = net.nodes["b"].store->Read(net.now);
  REQUIRE(read);
  for (int i = 0; i < 1000 && net.nodes["b"].outcomes.empty(); ++i) net.Run(absl::Milliseconds(1));
  REQUIRE(net.nodes["b"].outcomes.size() == 1);
  CHECK(net.nodes["b"].outcomes[0].id == *read);
  CHECK(net.nodes["b"].outcomes[0].ok);
  const StoreRecord* r = net.nodes["b"].store->Get("spec/z");
  REQUIRE(r != nullptr);
  CHECK(r->value == "fresh");
}

TEST_CASE("the leader's crash elects another; a write forwarded meanwhile is applied once") {
  Net net;
  for (const char* id : {"a", "b", "c"}) net.Add(id);
  net.Run(absl::Seconds(4));
  REQUIRE(net.Leader() == "a");
  net.Crash("a");
  net.nodes["b"].store->Put(net.now, "spec/y", "v");
  net.Run(absl::Seconds(4));
  CHECK((net.Leader() == "b" || net.Leader() == "c"));
  REQUIRE(net.nodes["b"].outcomes.size() == 1);
  CHECK(net.nodes["b"].outcomes[0].ok);
  net.Add("a");  // restarts from its log and catches up
  net.Run(absl::Seconds(2));
  REQUIRE(net.nodes["a"].store->Get("spec/y") != nullptr);
}

TEST_CASE("up to five voters; the others stand by; a dead voter is replaced") {
  Net net;
  for (const char* id : {"a", "b", "c", "d", "e", "f"}) net.Add(id);
  net.Run(absl::Seconds(10));
  std::string leader = net.Leader();
  REQUIRE(!leader.empty());
  auto roles = [&] {
    std::map<std::string, int> out;
    for (const auto& s : net.nodes[net.Leader()].store->Configuration()) out[s.node] = s.role;
    return out;
  };
  std::map<std::string, int> r = roles();
  CHECK(r.size() == 6);
  int voters = 0;
  for (const auto& [node, role] : r) voters += role == 1;
  CHECK(voters == 5);
  std::string victim;
  for (const auto& [node, role] : r) {
    if (role == 1 && node != leader) victim = node;
  }
  net.Crash(victim);
  net.dead.insert(victim);
  net.Run(absl::Seconds(10));
  r = roles();
  CHECK(r.count(victim) == 0);
  voters = 0;
  for (const auto& [node, role] : r) voters += role == 1;
  CHECK(voters == 5);
}

TEST_CASE("voters go from one to three together: a second scheduler alone stays a standby") {
  Net net;
  for (const char* id : {"a", "b"}) net.Add(id);
  net.Run(absl::Seconds(4));
  REQUIRE(net.Leader() == "a");
  auto voters = [&] {
    int n = 0;
    for (const auto& s : net.nodes["a"].store->Configuration()) n += s.role == 1;
    return n;
  };
  CHECK(net.nodes["a"].store->Configuration().size() == 2);
  CHECK(voters() == 1);  // two voters would stall the moment b lost the election
  // b stops answering (it is no longer a scheduler): the single voter goes on committing.
  net.Crash("b");
  std::optional<uint64_t> id = net.nodes["a"].store->Put(net.now, "spec/x", "one");
  REQUIRE(id);
  net.Run(absl::Milliseconds(500));
  REQUIRE(net.nodes["a"].outcomes.size() == 1);
  CHECK(net.nodes["a"].outcomes[0].ok);
  net.Add("b");
  net.Add("c");
  net.Run(absl::Seconds(6));
  CHECK(voters() == 3);
}

TEST_CASE("a node with a log in view keeps the lowest id from bootstrapping a second cluster") {
  Net net;
  net.Add("b");
  net.Run(absl::Seconds(4));  // alone: it bootstraps
  REQUIRE(net.Leader() == "b");
  net.Add("a");  // a lower id, empty: must join b's cluster, not start its own
  net.Run(absl::Seconds(6));
  CHECK(net.nodes["a"].store->started());
  CHECK(net.nodes["a"].store->Configuration().size() == 2);
  CHECK(net.Leader() == "b");
}

TEST_CASE("members whose views of the scheduler set differ do not each bootstrap a cluster") {
  Net net;
  for (const char* id : {"a", "b", "c"}) net.Add(id);
  // b does not see a yet, so b takes itself for the lowest while a and c take a: each of a and b
  // hears "empty" from every member it sees, and without more each would bootstrap its own.
  net.views["b"] = {"b", "c"};
  net.Run(absl::Seconds(5));
  for (const char* id : {"a", "b", "c"}) {
    INFO(id);
    CHECK_FALSE(net.nodes[id].store->started());
  }
  net.views.clear();  // the views agree: a bootstraps, alone
  net.Run(absl::Seconds(5));
  CHECK(net.Leader() == "a");
  for (const char* id : {"a", "b", "c"}) {
    INFO(id);
    CHECK(net.nodes[id].store->started());
    CHECK(net.nodes[id].store->Configuration().size() == 3);
  }
}

TEST_CASE("garbage frames are refused") {
  consensus::MemoryLogStorage storage;
  RaftSpecStore store("a", &storage);
  REQUIRE(store.Open(absl::Now()).ok());
  CHECK_FALSE(store.Handle(absl::Now(), "b", "").ok());
  CHECK_FALSE(store.Handle(absl::Now(), "b", "\x09zz").ok());
  CHECK_FALSE(store.Handle(absl::Now(), "b", std::string("\x03\x01", 2)).ok());
  CHECK_FALSE(store.Handle(absl::Now(), "b", std::string("\x01garbage")).ok());
}

}  // namespace
}  // namespace exa::scheduler

namespace exa::scheduler {
namespace {

TEST_CASE("a member out of the scheduler set past the grace leaves the configuration") {
  Net net;
  for (const char* id : {"a", "b", "c"}) net.Add(id);
  net.Run(absl::Seconds(4));
  REQUIRE(net.Leader() == "a");
  net.Crash("c");  // gone from the live set, never declared dead (e.g. it lost the role)
  net.Run(absl::Seconds(20));
  CHECK(net.nodes["a"].store->Configuration().size() == 3);  // within the grace: kept
  net.Run(absl::Seconds(15));
  CHECK(net.nodes["a"].store->Configuration().size() == 2);
}

}  // namespace
}  // namespace exa::scheduler
