// The SWIM core, driven by a tiny deterministic network, does what users rely on: nodes join
// and see each other, a silent node is suspected then declared dead, a suspected node that
// comes back refutes with a higher incarnation, a leave is not a death, metadata updates spread,
// and garbage packets change nothing.
#include "membership/swim_core.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "membership/codec.h"

namespace exa::membership {
namespace {

// N cores on a network with 1 ms latency; a node can be cut off (its packets dropped both ways).
class TestNet {
 public:
  // seed_cut: node 0 (the seed) starts cut off, so the first joins are lost.
  explicit TestNet(int n, Config config = Config::Lan(), bool seed_cut = false)
      : now_(absl::UnixEpoch()) {
    for (int i = 0; i < n; ++i) {
      std::string id = "node-" + std::to_string(i);
      Metadata md;
      md.rack = "rack-" + std::to_string(i % 2);
      cores_.push_back(std::make_unique<SwimCore>(
          config, SwimCore::LocalNode{id, "addr-" + std::to_string(i), md, 0}, 1000 + i, now_));
      cut_.push_back(seed_cut && i == 0);
      deaf_.push_back(false);
      events_.emplace_back();
    }
    for (int i = 1; i < n; ++i) cores_[i]->Join(now_, {"addr-0"});
    Flush();
  }

  SwimCore& core(int i) { return *cores_[i]; }
  void Cut(int i, bool cut) { cut_[i] = cut; }
  // Node i still runs and sends, but hears nothing (a one-way loss).
  void CutInbound(int i, bool cut) { deaf_[i] = cut; }
  absl::Time now() const { return now_; }

  // Runs until `until`, ticking each live core when due and delivering packets in order.
  void RunFor(absl::Duration d) {
    absl::Time end = now_ + d;
    while (true) {
      absl::Time next = absl::InfiniteFuture();
      for (const auto& [at, p] : in_flight_) next = std::min(next, at);
      for (size_t i = 0; i < cores_.size(); ++i) {
        if (!cut_[i]) next = std::min(next, cores_[i]->NextTick());
      }
      if (next > end) break;
      now_ = std::max(now_, next);
      for (size_t i = 0; i < cores_.size(); ++i) {
        if (!cut_[i] && cores_[i]->NextTick() <= now_) cores_[i]->Tick(now_);
      }
      while (!in_flight_.empty() && in_flight_.begin()->first <= now_) {
        Packet p = in_flight_.begin()->second;
        in_flight_.erase(in_flight_.begin());
        int to = IndexOf(p.to);
        if (to < 0 || cut_[to] || deaf_[to] || cut_[p.from]) continue;
        cores_[to]->HandlePacket(now_, "addr-" + std::to_string(p.from), p.bytes, p.channel);
      }
      Flush();
    }
    now_ = end;
  }

  // Events node `observer` saw about `subject`.
  std::vector<EventType> EventsAbout(int observer, int subject) const {
    std::vector<EventType> out;
    for (const Event& e : events_[observer]) {
      if (e.member.id == "node-" + std::to_string(subject)) out.push_back(e.type);
    }
    return out;
  }
  // kDead also for a member already reaped from the view.
  MemberState StateOf(int observer, int subject) const {
    const Member* m = cores_[observer]->Find("node-" + std::to_string(subject));
    return m == nullptr ? MemberState::kDead : m->state;
  }
  void Inject(int to, const std::string& bytes) {
    cores_[to]->HandlePacket(now_, "addr-x", bytes, Channel::kDatagram);
    Flush();
  }

 private:
  struct Packet {
    int from;
    Address to;
    Channel channel;
    std::string bytes;
  };
  static int IndexOf(const Address& a) {
    if (a.rfind("addr-", 0) != 0) return -1;
    return std::stoi(a.substr(5));
  }
  void Flush() {
    for (size_t i = 0; i < cores_.size(); ++i) {
      for (OutPacket& p : cores_[i]->TakePackets()) {
        in_flight_.emplace(now_ + absl::Milliseconds(1),
                           Packet{static_cast<int>(i), p.to, p.channel, std::move(p.bytes)});
      }
      for (Event& e : cores_[i]->TakeEvents()) events_[i].push_back(std::move(e));
    }
  }

  absl::Time now_;
  std::vector<std::unique_ptr<SwimCore>> cores_;
  std::vector<bool> cut_;
  std::vector<bool> deaf_;
  std::vector<std::vector<Event>> events_;
  std::multimap<absl::Time, Packet> in_flight_;
};

bool Contains(const std::vector<EventType>& v, EventType t) {
  return std::find(v.begin(), v.end(), t) != v.end();
}

TEST_CASE("Nodes that join through one seed all see each other alive", "[membership][swim]") {
  TestNet net(5);
  net.RunFor(absl::Seconds(5));
  for (int i = 0; i < 5; ++i) {
    CHECK(net.core(i).CountInState(MemberState::kAlive) == 5);
    for (int j = 0; j < 5; ++j) {
      if (i != j) CHECK(Contains(net.EventsAbout(i, j), EventType::kJoin));
    }
  }
}

TEST_CASE("Nodes whose join was lost join within seconds once the seed answers",
          "[membership][swim]") {
  // The seed is unreachable when the four join (not started yet, or a lost connection); the
  // reconnect loop alone would take 5-15 s. The join retry (1 s) makes it about one second.
  Config config = Config::Lan();
  REQUIRE(config.reconnect_interval >= absl::Seconds(5));
  TestNet net(5, config, /*seed_cut=*/true);
  net.RunFor(absl::Milliseconds(2500));
  for (int i = 1; i < 5; ++i) CHECK(net.core(i).CountInState(MemberState::kAlive) == 1);
  net.Cut(0, false);
  net.RunFor(absl::Milliseconds(2000));
  for (int i = 0; i < 5; ++i) CHECK(net.core(i).CountInState(MemberState::kAlive) == 5);
}

TEST_CASE("A silent node is suspected, then declared dead, by everyone", "[membership][swim]") {
  TestNet net(5);
  net.RunFor(absl::Seconds(5));
  net.Cut(4, true);
  // N = 5: min = 4 * log10(10) * 1 s = 4 s, max = 24 s; detection takes a few probe rounds.
  net.RunFor(absl::Seconds(40));
  for (int i = 0; i < 4; ++i) {
    INFO("observer " << i);
    auto events = net.EventsAbout(i, 4);
    CHECK(Contains(events, EventType::kSuspect));
    CHECK(Contains(events, EventType::kDead));
    CHECK(net.core(i).CountInState(MemberState::kAlive) == 4);
  }
  CHECK(net.core(0).stats().deaths >= 1);
}

TEST_CASE("A briefly unreachable node is suspected and refutes without dying",
          "[membership][swim]") {
  TestNet net(5);
  net.RunFor(absl::Seconds(5));
  uint32_t before = net.core(3).self().incarnation;
  net.Cut(3, true);
  // Long enough for a probe of node 3 to fail (1 s), shorter than the suspicion timeout
  // (N = 5: min 4 s, reached after two confirmations).
  net.RunFor(absl::Milliseconds(3500));
  net.Cut(3, false);
  net.RunFor(absl::Seconds(10));
  bool suspected = false;
  for (int i = 0; i < 5; ++i) {
    if (i == 3) continue;
    auto events = net.EventsAbout(i, 3);
    suspected = suspected || Contains(events, EventType::kSuspect);
    CHECK_FALSE(Contains(events, EventType::kDead));
    CHECK(net.StateOf(i, 3) == MemberState::kAlive);
  }
  CHECK(suspected);
  CHECK(net.core(3).self().incarnation > before);
  CHECK(net.core(3).stats().refutations >= 1);
}

TEST_CASE("A suspicion that missed the refutation is cleared by the suspect itself",
          "[membership][swim]") {
  // Node 0 hears nothing for 2.5 s: its probes fail, it suspects members, and they refute; every
  // "alive" they gossip is lost on the way to node 0 and the broadcasts run out of
  // retransmissions. Back on the air, node 0 still holds the old-incarnation suspicions (and,
  // having failed probes, probes slowly). It tells each suspect once per probe interval, and a
  // suspect that has already refuted answers with its alive state; otherwise node 0 declares
  // live members dead at the suspicion timeout, long before the next push-pull.
  TestNet net(5);
  net.RunFor(absl::Seconds(5));
  net.CutInbound(0, true);
  net.RunFor(absl::Milliseconds(2500));
  net.CutInbound(0, false);
  uint64_t suspicions = net.core(0).stats().suspicions;
  REQUIRE(suspicions >= 1);
  net.RunFor(absl::Seconds(25));
  for (int i = 0; i < 5; ++i) {
    INFO("observer " << i);
    CHECK(net.core(i).stats().deaths == 0);
    CHECK(net.core(i).CountInState(MemberState::kAlive) == 5);
  }
}

TEST_CASE("A node declared dead comes back alive when it can talk again", "[membership][swim]") {
  TestNet net(5);
  net.RunFor(absl::Seconds(5));
  net.Cut(2, true);
  net.RunFor(absl::Seconds(20));
  REQUIRE(net.StateOf(0, 2) == MemberState::kDead);
  net.Cut(2, false);
  net.RunFor(absl::Seconds(15));
  for (int i = 0; i < 5; ++i) {
    if (i == 2) continue;
    INFO("observer " << i);
    CHECK(net.StateOf(i, 2) == MemberState::kAlive);
    auto events = net.EventsAbout(i, 2);
    // Dead, then Join again: a return is a (re)join, not a refutation of a suspicion.
    auto dead = std::find(events.begin(), events.end(), EventType::kDead);
    CHECK(std::find(dead, events.end(), EventType::kJoin) != events.end());
  }
}

TEST_CASE("A node reaped from every view rejoins after a longer silence", "[membership][swim]") {
  TestNet net(5);
  net.RunFor(absl::Seconds(5));
  net.Cut(2, true);
  net.RunFor(absl::Seconds(60));  // dead, then reaped after gossip_to_the_dead_time (30 s)
  CHECK(net.core(0).Find("node-2") == nullptr);
  net.Cut(2, false);
  net.RunFor(absl::Seconds(15));
  for (int i = 0; i < 5; ++i) {
    if (i != 2) CHECK(net.StateOf(i, 2) == MemberState::kAlive);
  }
}

TEST_CASE("Graceful leave is reported as leave, never as death", "[membership][swim]") {
  TestNet net(4);
  net.RunFor(absl::Seconds(5));
  net.core(1).Leave(net.now());
  net.RunFor(absl::Seconds(2));
  net.Cut(1, true);
  net.RunFor(absl::Seconds(30));
  for (int i : {0, 2, 3}) {
    auto events = net.EventsAbout(i, 1);
    CHECK(Contains(events, EventType::kLeave));
    CHECK_FALSE(Contains(events, EventType::kDead));
  }
}

TEST_CASE("Metadata updates spread with a new incarnation", "[membership][swim]") {
  TestNet net(6);
  net.RunFor(absl::Seconds(5));
  Metadata md = net.core(5).self().metadata;
  md.replicas = ReplicaSummary{12, 7};
  md.taints = {"burn-in-failed"};
  REQUIRE(net.core(5).UpdateMetadata(net.now(), md).ok());
  net.RunFor(absl::Seconds(3));
  for (int i = 0; i < 5; ++i) {
    CHECK(Contains(net.EventsAbout(i, 5), EventType::kUpdate));
    CHECK(net.core(i).Find("node-5")->metadata == md);
  }
  Metadata huge;
  huge.build_version = std::string(kMaxMetadataBytes + 1, 'v');
  CHECK(net.core(5).UpdateMetadata(net.now(), huge).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Garbage packets are counted and change no state", "[membership][swim]") {
  TestNet net(3);
  net.RunFor(absl::Seconds(3));
  std::vector<Member> before = net.core(0).members();
  uint32_t incarnation = net.core(0).self().incarnation;
  std::string valid = EncodeSingle(Suspect{incarnation, "node-0", "node-1"});
  net.Inject(0, valid.substr(0, valid.size() - 1));
  net.Inject(0, std::string("\x01\x09\xff\xff", 4));
  net.Inject(0, "");
  net.Inject(0, std::string(70000, 'x'));
  CHECK(net.core(0).stats().bad_packets == 4);
  CHECK(net.core(0).self().incarnation == incarnation);
  CHECK(net.core(0).members().size() == before.size());
  CHECK(net.core(0).TakePackets().empty());
}

TEST_CASE("A ping meant for another node id is ignored", "[membership][swim]") {
  TestNet net(2);
  net.RunFor(absl::Seconds(2));
  net.Inject(0, EncodeSingle(Ping{99, "someone-else", "node-1", "addr-1"}));
  CHECK(net.core(0).stats().wrong_target == 1);
}

}  // namespace
}  // namespace exa::membership
