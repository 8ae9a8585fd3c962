#include "sim/gossip_sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

#include "cluster/election.h"
#include "common/random.h"
#include "common/strings.h"
#include "fmt/format.h"
#include "membership/swim_core.h"
#include "sim/event_queue.h"
#include "sim/sim_network.h"

namespace exa::sim {
namespace {

using membership::Address;
using membership::Channel;
using membership::Event;
using membership::EventType;
using membership::MemberState;
using membership::SwimCore;
using json = nlohmann::json;

// How often the simulator checks cluster-wide conditions (convergence, a paused node back).
constexpr absl::Duration kCheckInterval = absl::Milliseconds(250);
// Updates are not measured while a fault is active or this soon after it ends: a paused or
// partitioned node cannot receive them, which is not what dissemination_s measures.
constexpr absl::Duration kQuietAfterFault = absl::Seconds(30);

json Quantiles(std::vector<double> xs) {
  json out;
  out["n"] = xs.size();
  if (xs.empty()) {
    out["p50"] = nullptr;
    out["p99"] = nullptr;
    out["max"] = nullptr;
    return out;
  }
  std::sort(xs.begin(), xs.end());
  auto rank = [&xs](double q) {
    size_t i = static_cast<size_t>(std::ceil(q * xs.size()));
    return xs[std::min(xs.size() - 1, i == 0 ? 0 : i - 1)];
  };
  auto round3 = [](double v) { return std::round(v * 1000.0) / 1000.0; };
  out["p50"] = round3(rank(0.50));
  out["p99"] = round3(rank(0.99));
  out["max"] = round3(xs.back());
  return out;
}

std::string FakeUuid(Random& rng) {
  uint64_t a = rng.Next(), b = rng.Next();
  return fmt::format("{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}", a >> 32, (a >> 16) & 0xffff, a & 0xfff,
                     0x8000 | ((b >> 48) & 0x3fff), b & 0xffffffffffffULL);
}

class Simulation {
 public:
  explicit Simulation(const GossipSimOptions& o)
      : o_(o),
        rng_(o.seed),
        network_(LinkModel{.unit_us = 1000.0,
                           .base = o.latency_ms,
                           .jitter = o.jitter_ms,
                           // A reliable exchange costs a connection setup on top: one more round
                           // trip.
                           .reliable_setup = 2 * absl::Microseconds(1000.0 * o.latency_ms),
                           .loss = o.loss}) {
    config_ = o.profile == "wan" ? membership::Config::Wan() : membership::Config::Lan();
    start_ = absl::UnixEpoch() + absl::Hours(24 * 365 * 50);
  }

  json Run();

 private:
  struct Node {
    std::unique_ptr<SwimCore> core;
    std::string id;
    Address address;
    int rack = 0;
    int half = 0;
    bool started = false;
    bool killed = false;
    bool paused = false;
    bool ever_paused = false;
    absl::Time resumed_at = absl::InfinitePast();
    uint64_t tick_gen = 0;
    absl::Time scheduled = absl::InfiniteFuture();
  };
  enum class Kind : uint8_t { kTick, kDeliver, kStart, kFault, kHeal, kResume, kUpdate, kCheck };
  struct QEvent {
    Kind kind;
    int node;
    uint64_t gen;
    InFlight packet;  // kDeliver (kStore: who sent it)
  };
  struct Update {
    int subject;
    uint32_t incarnation;
    absl::Time start;
    std::vector<char> seen;
    int seen_count = 0;
    bool done = false;
  };
  struct Killed {
    absl::Time at;
    std::vector<char> dead_seen;
    int dead_count = 0;
    bool suspected = false, declared = false, everywhere = false;
  };
  struct Paused {
    int node;
    bool suspected = false, declared_dead = false, back = false;
    absl::Time resume_at;
  };

  void Push(absl::Time at, Kind kind, int node, uint64_t gen = 0, InFlight packet = {}) {
    queue_.Push(at, QEvent{kind, node, gen, std::move(packet)});
  }
  bool Reachable(int a, int b) const { return !partitioned_ || nodes_[a].half == nodes_[b].half; }
  bool Live(int i) const { return nodes_[i].started && !nodes_[i].killed; }
  bool InWindow(absl::Time now) const { return now >= window_start_; }
  // Live, running nodes other than `subject`: who must hear about it.
  int NeededObservers(int subject) const {
    int n = 0;
    for (int i = 0; i < o_.nodes; ++i) n += (Live(i) && !nodes_[i].paused && i != subject) ? 1 : 0;
    return n;
  }
  int LiveCount() const {
    int n = 0;
    for (int i = 0; i < o_.nodes; ++i) n += Live(i) ? 1 : 0;
    return n;
  }

  void Start(absl::Time now, int i);
  void AfterInteraction(absl::Time now, int i);
  void Route(absl::Time now, int from, membership::OutPacket packet);
  void Observe(absl::Time now, int observer, const Event& e);
  void StartFaults(absl::Time now);
  void Check(absl::Time now);
  bool AllSeeAllAlive() const;
  void IssueUpdate(absl::Time now);
  json Election() const;
  json Result(double wall_s);

  GossipSimOptions o_;
  membership::Config config_;
  Random rng_;
  absl::Time start_;
  std::vector<Node> nodes_;
  SimNetwork network_;
  std::unordered_map<std::string, int> by_id_;
  EventQueue<QEvent> queue_;

  bool warmed_up_ = false;
  absl::Time window_start_ = absl::InfiniteFuture();
  absl::Time end_ = absl::InfiniteFuture();
  double warmup_s_ = 0;
  bool partitioned_ = false;
  bool partition_happened_ = false;
  absl::Time heal_at_ = absl::InfiniteFuture();
  absl::Time last_fault_end_ = absl::InfinitePast();
  double reconverge_s_ = -1;
  int active_pauses_ = 0;

  uint64_t window_packets_ = 0;
  uint64_t window_bytes_ = 0;
  std::map<int, Killed> killed_;
  std::vector<Paused> paused_;
  std::vector<Update> updates_;
  std::vector<double> suspect_first_, dead_confirmed_, dead_everywhere_;
  std::vector<double> dissemination_, back_alive_;
  std::vector<char> falsely_dead_;
  uint64_t false_suspicions_ = 0;
};

void Simulation::Start(absl::Time now, int i) {
  Node& n = nodes_[i];
  membership::Metadata md;
  md.rack = fmt::format("rack-{:02d}", n.rack);
  md.nvlink_domain = fmt::format("nvl-{:02d}-{}", n.rack, i / 8);
  md.gpus = membership::GpuSummary{8, 81920, "H100-SXM"};
  md.build_version = "0.1.0";
  md.replicas = membership::ReplicaSummary{12, 12};
  n.core = std::make_unique<SwimCore>(config_, SwimCore::LocalNode{n.id, n.address, md, 0},
                                      rng_.Next(), now);
  n.started = true;
  std::vector<Address> seeds;
  // Two random earlier nodes: spreads join syncs so no seed hits its inbound bound.
  for (int k = 0; k < 2 && i > 0; ++k) seeds.push_back(nodes_[rng_.Uniform(i)].address);
  n.core->Join(now, seeds);
  AfterInteraction(now, i);
}

void Simulation::AfterInteraction(absl::Time now, int i) {
  Node& n = nodes_[i];
  for (membership::OutPacket& p : n.core->TakePackets()) Route(now, i, std::move(p));
  for (const Event& e : n.core->TakeEvents()) Observe(now, i, e);
  absl::Time next = std::max(now, n.core->NextTick());
  if (next != n.scheduled) {
    n.scheduled = next;
    Push(next, Kind::kTick, i, ++n.tick_gen);
  }
}

void Simulation::Route(absl::Time now, int from, membership::OutPacket packet) {
  if (InWindow(now)) {
    window_packets_++;
    window_bytes_ += packet.bytes.size();
  }
  std::optional<int> to = network_.NodeAt(packet.to);
  if (!to || !Reachable(from, *to)) return;
  std::optional<absl::Duration> delay = network_.Transit(packet.channel, rng_);
  if (!delay) return;  // lost
  Push(now + *delay, Kind::kDeliver, *to, 0,
       InFlight{from, packet.channel, std::move(packet.bytes)});
}

void Simulation::Observe(absl::Time now, int observer, const Event& e) {
  auto sit = by_id_.find(e.member.id);
  if (sit == by_id_.end()) return;
  int subject = sit->second;
  for (Update& u : updates_) {
    if (u.done || u.subject != subject || e.member.incarnation < u.incarnation ||
        u.seen[observer]) {
      continue;
    }
    u.seen[observer] = 1;
    u.seen_count++;
    if (u.seen_count >= NeededObservers(u.subject)) {
      u.done = true;
      dissemination_.push_back(absl::ToDoubleSeconds(now - u.start));
    }
  }
  if (auto kit = killed_.find(subject); kit != killed_.end()) {
    Killed& k = kit->second;
    double since = absl::ToDoubleSeconds(now - k.at);
    if (e.type == EventType::kSuspect && !k.suspected) {
      k.suspected = true;
      suspect_first_.push_back(since);
    }
    if (e.type == EventType::kDead) {
      if (!k.declared) {
        k.declared = true;
        dead_confirmed_.push_back(since);
      }
      if (!k.dead_seen[observer]) {
        k.dead_seen[observer] = 1;
        k.dead_count++;
        if (!k.everywhere && k.dead_count >= NeededObservers(subject)) {
          k.everywhere = true;
          dead_everywhere_.push_back(since);
        }
      }
    }
    return;
  }
  for (Paused& p : paused_) {
    if (p.node != subject) continue;
    if (e.type == EventType::kSuspect) p.suspected = true;
    if (e.type == EventType::kDead) p.declared_dead = true;
    return;
  }
  if (!InWindow(now)) return;
  bool cut_off = partition_happened_ && nodes_[observer].half != nodes_[subject].half;
  if (e.type == EventType::kSuspect && !cut_off) false_suspicions_++;
  if (e.type == EventType::kDead && !cut_off) falsely_dead_[subject] = 1;
}

void Simulation::StartFaults(absl::Time now) {
  std::vector<int> order(o_.nodes);
  for (int i = 0; i < o_.nodes; ++i) order[i] = i;
  rng_.Shuffle(order);
  size_t next = 0;
  for (int k = 0; k < o_.kill && next < order.size(); ++k) {
    int i = order[next++];
    nodes_[i].killed = true;
    killed_[i] = Killed{now, std::vector<char>(o_.nodes, 0)};
  }
  for (int k = 0; k < o_.pause_nodes && next < order.size(); ++k) {
    int i = order[next++];
    nodes_[i].paused = true;
    nodes_[i].ever_paused = true;
    active_pauses_++;
    absl::Time resume = now + absl::Seconds(o_.pause_s);
    paused_.push_back(Paused{i, false, false, false, resume});
    Push(resume, Kind::kResume, i);
  }
  if (o_.partition_s > 0) {
    partitioned_ = true;
    partition_happened_ = true;
    heal_at_ = now + absl::Seconds(o_.partition_s);
    Push(heal_at_, Kind::kHeal, -1);
  }
}

bool Simulation::AllSeeAllAlive() const {
  size_t live = static_cast<size_t>(LiveCount());
  for (int i = 0; i < o_.nodes; ++i) {
    if (!Live(i)) continue;
    if (nodes_[i].core->CountInState(MemberState::kAlive) != live) return false;
  }
  return true;
}

void Simulation::Check(absl::Time now) {
  if (!warmed_up_) {
    bool all_started =
        std::all_of(nodes_.begin(), nodes_.end(), [](const Node& n) { return n.started; });
    absl::Duration elapsed = now - start_;
    if ((all_started && AllSeeAllAlive()) || elapsed > absl::Seconds(o_.max_warmup_s)) {
      warmed_up_ = true;
      warmup_s_ = absl::ToDoubleSeconds(elapsed);
      // Let the join traffic drain before measuring steady state.
      window_start_ = now + absl::Seconds(10);
      end_ = window_start_ + absl::Seconds(o_.duration_s);
      Push(window_start_, Kind::kFault, -1);
      if (o_.update_interval_s > 0) {
        Push(window_start_ + absl::Seconds(o_.update_interval_s) * rng_.UniformDouble(),
             Kind::kUpdate, -1);
      }
    }
  } else {
    if (partition_happened_ && !partitioned_ && reconverge_s_ < 0 && AllSeeAllAlive()) {
      reconverge_s_ = absl::ToDoubleSeconds(now - heal_at_);
      last_fault_end_ = now;
    }
    for (Paused& p : paused_) {
      if (p.back || nodes_[p.node].paused) continue;
      bool all = true;
      for (int i = 0; i < o_.nodes && all; ++i) {
        if (!Live(i) || i == p.node) continue;
        const membership::Member* m = nodes_[i].core->Find(nodes_[p.node].id);
        all = m != nullptr && m->state == MemberState::kAlive;
      }
      if (all) {
        p.back = true;
        back_alive_.push_back(absl::ToDoubleSeconds(now - p.resume_at));
      }
    }
  }
  if (now + kCheckInterval <= end_) Push(now + kCheckInterval, Kind::kCheck, -1);
}

void Simulation::IssueUpdate(absl::Time now) {
  if (o_.update_interval_s <= 0) return;
  Push(now + absl::Seconds(o_.update_interval_s), Kind::kUpdate, -1);
  if (partitioned_ || active_pauses_ > 0 || now - last_fault_end_ < kQuietAfterFault) return;
  std::vector<int> healthy;
  for (int i = 0; i < o_.nodes; ++i) {
    if (Live(i) && !nodes_[i].paused) healthy.push_back(i);
  }
  if (healthy.empty()) return;
  int i = healthy[rng_.Uniform(healthy.size())];
  SwimCore& core = *nodes_[i].core;
  membership::Metadata md = core.self().metadata;
  md.replicas.ready = static_cast<uint16_t>((md.replicas.ready + 1) % 13);
  if (!core.UpdateMetadata(now, md).ok()) return;
  updates_.push_back(Update{i, core.self().incarnation, now, std::vector<char>(o_.nodes, 0)});
  AfterInteraction(now, i);
}

json Simulation::Election() const {
  std::map<cluster::Assignment, int> votes;
  for (int i = 0; i < o_.nodes; ++i) {
    if (!Live(i) || nodes_[i].paused) continue;
    std::vector<cluster::ElectionNode> view;
    for (const membership::Member& m : nodes_[i].core->members()) {
      if (m.state != MemberState::kAlive && m.state != MemberState::kSuspect) continue;
      view.push_back(
          cluster::ElectionNode{m.id, m.metadata.rack, cluster::ParseRoleList(m.metadata.roles)});
    }
    votes[cluster::ElectRoles(view, cluster::ElectionConfig{})]++;
  }
  json out;
  if (votes.empty()) return out;
  auto best = std::max_element(votes.begin(), votes.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  int voters = 0;
  for (const auto& [a, v] : votes) voters += v;
  out["agreement"] = static_cast<double>(best->second) / voters;
  std::map<std::string, int> count;
  std::map<std::string, std::set<std::string>> racks;
  std::map<std::string, int> storage_per_rack;
  for (const auto& [id, roles] : best->first) {
    const std::string& rack = nodes_[by_id_.at(id)].core->self().metadata.rack;
    for (const std::string& r : roles.Names()) {
      count[r]++;
      racks[r].insert(rack);
    }
    if (roles.Has(cluster::Role::kStorage)) storage_per_rack[rack]++;
  }
  json roles;
  for (cluster::Role r : cluster::kAllRoles) {
    std::string name(cluster::RoleName(r));
    roles[name] = {{"nodes", count[name]}, {"racks", racks[name].size()}};
  }
  out["roles"] = roles;
  int min_storage = storage_per_rack.empty() ? 0 : 1 << 30, max_storage = 0;
  for (const auto& [rack, c] : storage_per_rack) {
    min_storage = std::min(min_storage, c);
    max_storage = std::max(max_storage, c);
  }
  out["storage_per_rack"] = {{"min", min_storage}, {"max", max_storage}};
  return out;
}

json Simulation::Result(double wall_s) {
  json r;
  r["scenario"] = {{"nodes", o_.nodes},
                   {"seed", o_.seed},
                   {"duration_s", o_.duration_s},
                   {"loss", o_.loss},
                   {"latency_ms", o_.latency_ms},
                   {"jitter_ms", o_.jitter_ms},
                   {"kill", o_.kill},
                   {"pause_nodes", o_.pause_nodes},
                   {"pause_s", o_.pause_s},
                   {"partition_s", o_.partition_s},
                   {"racks", o_.racks},
                   {"profile", o_.profile}};
  r["warmup_s"] = warmup_s_;
  r["converged_before_window"] = warmup_s_ < o_.max_warmup_s;
  r["suspect_first_s"] = Quantiles(suspect_first_);
  r["dead_confirmed_s"] = Quantiles(dead_confirmed_);
  r["dead_everywhere_s"] = Quantiles(dead_everywhere_);
  int false_deaths = 0;
  for (char c : falsely_dead_) false_deaths += c;
  r["false_deaths"] = false_deaths;
  r["false_suspicions"] = false_suspicions_;
  json d = Quantiles(dissemination_);
  int incomplete = 0;
  for (const Update& u : updates_) incomplete += u.done ? 0 : 1;
  d["incomplete"] = incomplete;
  r["dissemination_s"] = d;
  double node_seconds = LiveCount() * o_.duration_s;
  r["msgs_per_node_per_s"] = std::round(100.0 * window_packets_ / node_seconds) / 100.0;
  r["bytes_per_node_per_s"] = std::round(window_bytes_ / node_seconds);
  r["reconverge_after_heal_s"] = reconverge_s_ >= 0 ? json(reconverge_s_) : json(nullptr);
  if (!paused_.empty()) {
    int suspected = 0, dead = 0, back = 0;
    for (const Paused& p : paused_) {
      suspected += p.suspected;
      dead += p.declared_dead;
      back += p.back;
    }
    r["pause"] = {{"nodes", paused_.size()},
                  {"suspected", suspected},
                  {"declared_dead", dead},
                  {"back_alive", back},
                  {"back_alive_s", Quantiles(back_alive_)}};
  }
  json e = Election();
  r["election_agreement"] = e.value("agreement", 0.0);
  r["election"] = e;
  membership::Stats total;
  int max_health = 0;
  for (const Node& n : nodes_) {
    if (!n.started) continue;
    const membership::Stats& s = n.core->stats();
    total.bad_packets += s.bad_packets;
    total.refutations += s.refutations;
    total.push_pulls_rejected += s.push_pulls_rejected;
    total.probes_abandoned += s.probes_abandoned;
    if (!n.killed) max_health = std::max(max_health, n.core->health_score());
  }
  r["totals"] = {{"bad_packets", total.bad_packets},
                 {"refutations", total.refutations},
                 {"push_pulls_rejected", total.push_pulls_rejected},
                 {"probes_abandoned", total.probes_abandoned},
                 {"max_health_score_at_end", max_health}};
  r["wall_s"] = std::round(wall_s * 1000.0) / 1000.0;
  return r;
}

json Simulation::Run() {
  auto wall_start = std::chrono::steady_clock::now();
  nodes_.resize(o_.nodes);
  falsely_dead_.assign(o_.nodes, 0);
  for (int i = 0; i < o_.nodes; ++i) {
    Node& n = nodes_[i];
    n.id = FakeUuid(rng_);
    n.rack = i % std::max(1, o_.racks);
    n.half = i < o_.nodes / 2 ? 0 : 1;
    n.address = fmt::format("10.{}.{}.{}:7946", n.rack, (i / 250) % 250, i % 250 + 1);
    network_.Listen(n.address, i);
    by_id_[n.id] = i;
    Push(start_ + absl::Microseconds(1000.0 * o_.join_spacing_ms * i), Kind::kStart, i);
  }
  Push(start_ + kCheckInterval, Kind::kCheck, -1);
  queue_.RunUntil(end_, [&](absl::Time now, const QEvent& ev) {
    switch (ev.kind) {
      case Kind::kStart:
        Start(now, ev.node);
        break;
      case Kind::kTick: {
        Node& n = nodes_[ev.node];
        if (n.killed || n.paused || ev.gen != n.tick_gen) break;
        n.scheduled = absl::InfiniteFuture();
        n.core->Tick(now);
        AfterInteraction(now, ev.node);
        break;
      }
      case Kind::kDeliver: {
        Node& n = nodes_[ev.node];
        // A paused process does not read its socket; we drop rather than queue (a full socket
        // buffer does the same to a long pause).
        if (!n.started || n.killed || n.paused || !Reachable(ev.packet.from, ev.node)) break;
        n.core->HandlePacket(now, nodes_[ev.packet.from].address, ev.packet.bytes,
                             ev.packet.channel);
        AfterInteraction(now, ev.node);
        break;
      }
      case Kind::kFault:
        StartFaults(now);
        break;
      case Kind::kHeal:
        partitioned_ = false;
        last_fault_end_ = now;
        break;
      case Kind::kResume: {
        Node& n = nodes_[ev.node];
        n.paused = false;
        n.resumed_at = now;
        active_pauses_--;
        last_fault_end_ = now;
        n.core->Tick(now);
        AfterInteraction(now, ev.node);
        break;
      }
      case Kind::kUpdate:
        IssueUpdate(now);
        break;
      case Kind::kCheck:
        Check(now);
        break;
    }
  });
  double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return Result(wall_s);
}

}  // namespace

nlohmann::json RunGossipSim(const GossipSimOptions& options) { return Simulation(options).Run(); }

}  // namespace exa::sim
