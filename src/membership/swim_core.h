// The SWIM + Lifeguard membership core, sans-IO (docs/architecture.md#module-map rule 1). It is fed
// packets and `now`, and hands back packets to send and events; it never reads a clock, opens a
// socket, sleeps or starts a thread. The daemon drives it from one Asio strand; exaserve-sim drives
// thousands of them on virtual time.
//
// Driving it:
//   SwimCore core(config, {id, address, metadata, incarnation}, seed, now);
//   core.Join(now, seeds);                       // push-pull with each seed
//   on packet:  core.HandlePacket(now, from, bytes, channel);
//   on timer:   core.Tick(now);                  // runs whatever is due
//   then send   core.TakePackets()  (kReliable = over TCP), publish core.TakeEvents(),
//   and arm a timer for core.NextTick().
//
// What it implements (memberlist + Lifeguard, plus partition healing):
//   - probing round-robin over a list reshuffled at each pass; ping → ack; after probe_timeout,
//     ping-req through indirect_checks members (with nack) and a reliable (TCP) fallback ping;
//   - suspicion with incarnations, refutation, alive / suspect / dead / left, graceful leave;
//   - dissemination piggybacked on every datagram and gossiped to gossip_nodes members per
//     gossip_interval, each update sent retransmit_mult * ceil(log10(N+1)) times, alive first;
//   - Lifeguard local health scaling probe interval and timeout, dynamic suspicion timeout with
//     confirmations, buddy system (a ping to a suspect carries the suspicion), nacks;
//   - push-pull full-state sync: join, periodic (interval scaled with N), bounded;
//   - reconnect: periodic push-pull with recently dead members and seeds, so partitions heal;
//   - a node that hears from a peer it holds dead tells it so, so it can refute at once.
//
// Thread safety: none. One owner calls every method.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/random.h"
#include "membership/awareness.h"
#include "membership/broadcast_queue.h"
#include "membership/config.h"
#include "membership/member.h"
#include "membership/messages.h"
#include "membership/suspicion.h"

namespace exa::membership {

struct OutPacket {
  Address to;
  Channel channel = Channel::kDatagram;
  std::string bytes;
};

// Counters for /metrics (issue: members by state, probes, suspicions, refutations, deaths,
// bytes in/out, bad packets, local health).
struct Stats {
  uint64_t packets_in = 0;
  uint64_t packets_out = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t bad_packets = 0;   // malformed, truncated or oversized: dropped
  uint64_t wrong_target = 0;  // pings meant for another node id
  uint64_t probes_sent = 0;
  uint64_t probes_failed = 0;
  uint64_t probes_abandoned = 0;  // this node stalled past a probe deadline: nobody blamed
  uint64_t indirect_probes_sent = 0;
  uint64_t tcp_fallback_pings = 0;
  uint64_t suspicions = 0;
  uint64_t refutations = 0;
  // Accusations older than our incarnation, answered with our alive state to the accuser.
  uint64_t stale_accusations_answered = 0;
  uint64_t deaths = 0;
  uint64_t push_pulls_sent = 0;
  uint64_t push_pulls_served = 0;
  uint64_t push_pulls_rejected = 0;  // over the inbound bound or too large
  uint64_t members_rejected = 0;     // over max_members
};

class SwimCore {
 public:
  struct LocalNode {
    NodeId id;
    Address address;
    Metadata metadata;
    uint32_t incarnation = 0;  // start above the last run's to come back as a restart
  };

  // `config` must be valid (Config::Validate); `self.metadata` must fit kMaxMetadataBytes.
  SwimCore(const Config& config, LocalNode self, uint64_t seed, absl::Time now);

  // Push-pull with each seed; retried while this node knows no other live member.
  void Join(absl::Time now, const std::vector<Address>& seeds);
  // A packet from `from`. Bad input is counted in stats().bad_packets and changes nothing.
  void HandlePacket(absl::Time now, const Address& from, std::string_view bytes, Channel channel);
  // Runs every timer due at `now`.
  void Tick(absl::Time now);
  // When Tick next has work. Always finite.
  absl::Time NextTick() const;
  // New metadata for this node, spread by gossip with a new incarnation.
  absl::Status UpdateMetadata(absl::Time now, Metadata metadata);
  // Announces a graceful leave; keep ticking until PendingBroadcasts() is 0 or a deadline.
  void Leave(absl::Time now);

  std::vector<OutPacket> TakePackets();
  std::vector<Event> TakeEvents();

  // The view: every known member including this node, in no particular order.
  const std::vector<Member>& members() const { return nodes_; }
  const Member* Find(const NodeId& id) const;
  const Member& self() const;
  size_t CountInState(MemberState state) const { return state_counts_[static_cast<size_t>(state)]; }
  int health_score() const { return awareness_.score(); }
  size_t PendingBroadcasts() const { return broadcasts_.size(); }
  const Stats& stats() const { return stats_; }
  const Config& config() const { return config_; }

 private:
  struct Probe {
    bool active = false;
    NodeId target;
    uint32_t seq = 0;
    absl::Time indirect_at;
    absl::Time deadline;
    bool indirect_sent = false;
    int expected_nacks = 0;
    int nacks = 0;
  };
  struct Relay {
    Address source_address;
    uint32_t source_seq = 0;
    bool want_nack = false;
    absl::Time deadline;
  };
  struct RecentlyDead {
    Address address;
    absl::Time since;
  };

  // Message handlers.
  void OnPing(absl::Time now, const Address& from, const Ping& ping, Channel channel);
  void OnIndirectPing(absl::Time now, const Address& from, const IndirectPing& req);
  void OnAck(absl::Time now, const Ack& ack);
  void OnNack(const Nack& nack);
  void OnPushPull(absl::Time now, const Address& from, const PushPull& pp);

  // State transitions (memberlist aliveNode / suspectNode / deadNode).
  // `spread` false: do not gossip what we learn (a join response: the cluster already knows).
  void AliveNode(absl::Time now, const Alive& a, bool spread = true);
  void SuspectNode(absl::Time now, const Suspect& s);
  void DeadNode(absl::Time now, const Dead& d);
  void Refute(absl::Time now, uint32_t accused_incarnation);
  void AnswerStaleAccusation(const NodeId& accuser);
  void NudgeSuspects(absl::Time now);
  void MergeRemoteState(absl::Time now, const PushPull& pp);

  // Timers.
  void StartProbe(absl::Time now);
  const Member* NextRoundRobinTarget(absl::Time now);
  const Member* NextCoordinatedTarget(absl::Time now, size_t slot);
  absl::Time NextProbeTime(absl::Time now) const;
  void StartIndirectProbe(absl::Time now, Probe& probe);
  void FinishProbe(absl::Time now, Probe& probe);
  void Gossip(absl::Time now);
  void PeriodicPushPull(absl::Time now);
  void Reconnect(absl::Time now);
  void JoinSeeds(absl::Time now);  // a join push-pull to every seed; arms the retry
  void ExpireTimers(absl::Time now);
  void ResetProbeOrder(absl::Time now);

  // Sending.
  void SendDatagram(const Address& to, std::vector<std::string> messages);
  void SendReliable(const Address& to, const Message& message);
  void SendPushPull(absl::Time now, const Address& to, bool join);
  PushPull LocalState(uint32_t seq, bool join, bool response) const;
  void Broadcast(const NodeId& node, const Message& message, bool alive);

  // Members.
  Member& Self();
  Member* FindMutable(const NodeId& id);
  void InsertAtRandom(Member member);
  void SetState(Member& m, MemberState state, absl::Time now);
  void Emit(EventType type, const Member& m) { events_.push_back(Event{type, m}); }
  std::vector<const Member*> RandomMembers(size_t k, const NodeId& exclude, bool include_dead,
                                           absl::Time now);
  size_t LiveCount() const;
  absl::Duration PushPullInterval() const;
  uint32_t NextSeq() { return next_seq_++; }

  Config config_;
  NodeId self_id_;
  Random rng_;
  Awareness awareness_;
  BroadcastQueue broadcasts_;
  Stats stats_;

  std::vector<Member> nodes_;
  absl::flat_hash_map<NodeId, size_t> index_;
  std::array<size_t, kNumMemberStates> state_counts_{};
  absl::flat_hash_map<NodeId, Suspicion> suspicions_;
  std::map<NodeId, RecentlyDead> recently_dead_;
  std::vector<Address> seeds_;
  bool leaving_ = false;

  // One slot per concurrent probe (Config::probe_redundancy with coordinated probing, else 1).
  std::vector<Probe> probes_;
  size_t probe_index_ = 0;
  // Coordinated probing: the shared ring for (view_version_, pass), rebuilt when either moves.
  uint64_t view_version_ = 0;
  uint64_t ring_version_ = ~uint64_t{0};
  int64_t ring_pass_ = -1;
  std::vector<std::pair<uint64_t, NodeId>> ring_;
  size_t ring_self_ = 0;
  absl::Duration probe_phase_;  // this node's fixed offset after each step boundary
  absl::flat_hash_map<uint32_t, Relay> relays_;
  absl::flat_hash_map<uint32_t, absl::Time> push_pulls_in_flight_;  // seq → deadline
  absl::Time inbound_window_start_ = absl::InfinitePast();
  int inbound_in_window_ = 0;
  absl::Time next_unknown_sync_at_ = absl::InfinitePast();

  absl::Time next_probe_at_;
  absl::Time next_gossip_at_;
  absl::Time next_push_pull_at_;
  absl::Time next_reconnect_at_;
  absl::Time next_join_retry_at_ = absl::InfiniteFuture();  // set while seeds are to be joined
  uint32_t next_seq_ = 1;

  std::vector<OutPacket> out_;
  std::vector<Event> events_;
};

}  // namespace exa::membership
