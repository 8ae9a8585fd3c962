#include "membership/swim_core.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/check.h"
#include "common/strings.h"
#include "membership/codec.h"

namespace exa::membership {
namespace {

// FNV-1a + splitmix64 finalizer: the same on every node and build (std::hash is not).
uint64_t StableHash(std::string_view salt, std::string_view id) {
  uint64_t h = 1469598103934665603ULL;
  for (std::string_view s : {salt, id}) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ULL;
    }
  }
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}

// memberlist pushPullScaleThreshold: above this many nodes the push-pull interval grows with
// log2(N) so the total sync traffic stays flat.
constexpr double kPushPullScaleThreshold = 32;

}  // namespace

SwimCore::SwimCore(const Config& config, LocalNode self, uint64_t seed, absl::Time now)
    : config_(config),
      self_id_(self.id),
      rng_(seed),
      awareness_(config.awareness_max),
      broadcasts_(config.max_queued_broadcasts) {
  EXA_CHECK(config_.Validate().ok()) << config_.Validate();
  probes_.resize(config_.coordinated_probing ? config_.probe_redundancy : 1);
  EXA_CHECK(!self.id.empty() && !self.address.empty()) << "node id and address are required";
  Member me;
  me.id = self.id;
  me.address = self.address;
  me.incarnation = self.incarnation;
  me.state = MemberState::kAlive;
  me.metadata = std::move(self.metadata);
  me.state_changed = now;
  index_[me.id] = 0;
  nodes_.push_back(std::move(me));
  state_counts_[static_cast<size_t>(MemberState::kAlive)] = 1;
  // Stagger the timers so nodes started together do not probe and gossip in lockstep.
  next_probe_at_ = now + config_.probe_interval * rng_.UniformDouble();
  next_gossip_at_ = now + config_.gossip_interval * rng_.UniformDouble();
  next_push_pull_at_ = now + config_.push_pull_interval * (0.5 + rng_.UniformDouble());
  next_reconnect_at_ = now + config_.reconnect_interval * (0.5 + rng_.UniformDouble());
  // Spread over the first tenth of each step: probes stay inside their step, and nodes do not
  // all send at the same instant.
  probe_phase_ = config_.probe_interval * 0.1 * rng_.UniformDouble();
}

// ---- Driving ---------------------------------------------------------------------------------

void SwimCore::Join(absl::Time now, const std::vector<Address>& seeds) {
  seeds_ = seeds;
  JoinSeeds(now);
}

void SwimCore::JoinSeeds(absl::Time now) {
  for (const Address& seed : seeds_) {
    if (seed != self().address) SendPushPull(now, seed, /*join=*/true);
  }
  next_join_retry_at_ = now + config_.join_retry_interval;
}

void SwimCore::HandlePacket(absl::Time now, const Address& from, std::string_view bytes,
                            Channel channel) {
  stats_.packets_in++;
  stats_.bytes_in += bytes.size();
  size_t max_bytes = channel == Channel::kDatagram ? size_t{65535} : config_.max_push_pull_bytes;
  absl::StatusOr<std::vector<Message>> messages = DecodePacket(bytes, max_bytes);
  if (!messages.ok()) {
    stats_.bad_packets++;
    return;
  }
  for (const Message& message : *messages) {
    std::visit(
        [&](const auto& m) {
          using T = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<T, Ping>) {
            OnPing(now, from, m, channel);
          } else if constexpr (std::is_same_v<T, IndirectPing>) {
            OnIndirectPing(now, from, m);
          } else if constexpr (std::is_same_v<T, Ack>) {
            OnAck(now, m);
          } else if constexpr (std::is_same_v<T, Nack>) {
            OnNack(m);
          } else if constexpr (std::is_same_v<T, Suspect>) {
            SuspectNode(now, m);
          } else if constexpr (std::is_same_v<T, Alive>) {
            AliveNode(now, m);
          } else if constexpr (std::is_same_v<T, Dead>) {
            DeadNode(now, m);
          } else if constexpr (std::is_same_v<T, PushPull>) {
            OnPushPull(now, from, m);
          }
        },
        message);
  }
}

void SwimCore::Tick(absl::Time now) {
  ExpireTimers(now);
  NudgeSuspects(now);
  for (Probe& probe : probes_) {
    if (probe.active && !probe.indirect_sent && now >= probe.indirect_at)
      StartIndirectProbe(now, probe);
    if (probe.active && now >= probe.deadline) FinishProbe(now, probe);
  }
  if (now >= next_probe_at_) {
    if (!leaving_) StartProbe(now);
    next_probe_at_ = NextProbeTime(now);
  }
  if (now >= next_gossip_at_) {
    Gossip(now);
    next_gossip_at_ = now + config_.gossip_interval;
  }
  if (now >= next_push_pull_at_) {
    if (!leaving_) PeriodicPushPull(now);
    next_push_pull_at_ = now + PushPullInterval();
  }
  if (now >= next_reconnect_at_) {
    if (!leaving_) Reconnect(now);
    next_reconnect_at_ = now + config_.reconnect_interval;
  }
  if (now >= next_join_retry_at_) {
    // Retry only while nobody answered: a node with peers heals through Reconnect.
    if (!leaving_ && LiveCount() <= 1) {
      JoinSeeds(now);
    } else {
      next_join_retry_at_ = absl::InfiniteFuture();
    }
  }
}

absl::Time SwimCore::NextTick() const {
  absl::Time t = std::min({next_probe_at_, next_gossip_at_, next_push_pull_at_, next_reconnect_at_,
                           next_join_retry_at_});
  for (const Probe& probe : probes_) {
    if (!probe.active) continue;
    t = std::min(
        t, probe.indirect_sent ? probe.deadline : std::min(probe.indirect_at, probe.deadline));
  }
  for (const auto& [id, s] : suspicions_) t = std::min({t, s.deadline(), s.next_nudge()});
  for (const auto& [seq, r] : relays_) t = std::min(t, r.deadline);
  for (const auto& [seq, deadline] : push_pulls_in_flight_) t = std::min(t, deadline);
  return t;
}

absl::Status SwimCore::UpdateMetadata(absl::Time now, Metadata metadata) {
  size_t size = EncodedMetadataSize(metadata);
  if (size > kMaxMetadataBytes) {
    return absl::InvalidArgumentError(
        StrCat("node metadata is ", size, " bytes encoded; the limit is ", kMaxMetadataBytes));
  }
  Member& me = Self();
  me.metadata = std::move(metadata);
  me.incarnation++;
  Broadcast(me.id, Alive{me.incarnation, me.id, me.address, me.metadata}, /*alive=*/true);
  return absl::OkStatus();
}

void SwimCore::Leave(absl::Time now) {
  if (leaving_) return;
  leaving_ = true;
  Member& me = Self();
  SetState(me, MemberState::kLeft, now);
  Broadcast(me.id, Dead{me.incarnation, me.id, me.id}, /*alive=*/false);
}

std::vector<OutPacket> SwimCore::TakePackets() { return std::exchange(out_, {}); }
std::vector<Event> SwimCore::TakeEvents() { return std::exchange(events_, {}); }

// ---- Handlers --------------------------------------------------------------------------------

void SwimCore::OnPing(absl::Time now, const Address& from, const Ping& ping, Channel channel) {
  if (!ping.target.empty() && ping.target != self_id_) {
    stats_.wrong_target++;
    return;
  }
  std::vector<std::string> reply{EncodeMessage(Ack{ping.seq})};
  if (const Member* source = Find(ping.source); source != nullptr) {
    // A peer we hold dead is talking to us: tell it, so it refutes now rather than after the
    // next push-pull (memberlist leaves such a node out until then).
    if (source->state == MemberState::kDead) {
      reply.push_back(EncodeMessage(Dead{source->incarnation, source->id, self_id_}));
    }
  } else if (ping.source != self_id_ && now >= next_unknown_sync_at_) {
    // A peer we do not know: learn its state (it may have been reaped while partitioned).
    next_unknown_sync_at_ = now + config_.probe_interval;
    SendPushPull(now, ping.source_address, /*join=*/false);
  }
  if (channel == Channel::kReliable) {
    SendReliable(from, Ack{ping.seq});
    return;
  }
  SendDatagram(from, std::move(reply));
}

void SwimCore::OnIndirectPing(absl::Time now, const Address& from, const IndirectPing& req) {
  if (relays_.size() >= 1024) return;  // bounded: a flood of ping-reqs cannot grow state
  uint32_t seq = NextSeq();
  // Nack at 80 % of the probe timeout: the requester sent us this at its own probe timeout and
  // decides at its probe interval (2x the timeout by default); a nack sent later than that is
  // counted as missing and wrongly raises the requester's health score.
  relays_[seq] = Relay{from, req.seq, req.want_nack, now + config_.probe_timeout * 0.8};
  SendDatagram(req.target_address,
               {EncodeMessage(Ping{seq, req.target, self_id_, self().address})});
}

void SwimCore::OnAck(absl::Time now, const Ack& ack) {
  if (auto it = relays_.find(ack.seq); it != relays_.end()) {
    SendDatagram(it->second.source_address, {EncodeMessage(Ack{it->second.source_seq})});
    relays_.erase(it);
    return;
  }
  for (Probe& probe : probes_) {
    if (!probe.active || ack.seq != probe.seq) continue;
    // A direct answer means we are healthy (Lifeguard -1); an indirect one is neutral.
    if (!probe.indirect_sent) awareness_.ApplyDelta(-1);
    probe.active = false;
  }
}

void SwimCore::OnNack(const Nack& nack) {
  for (Probe& probe : probes_) {
    if (probe.active && nack.seq == probe.seq) probe.nacks++;
  }
}

void SwimCore::OnPushPull(absl::Time now, const Address& from, const PushPull& pp) {
  if (pp.members.size() > config_.max_members) {
    stats_.push_pulls_rejected++;
    return;
  }
  if (pp.response) {
    push_pulls_in_flight_.erase(pp.seq);
  } else {
    if (now - inbound_window_start_ >= absl::Seconds(1)) {
      inbound_window_start_ = now;
      inbound_in_window_ = 0;
    }
    if (inbound_in_window_ >= config_.max_inbound_push_pulls_per_second) {
      stats_.push_pulls_rejected++;
      return;
    }
    inbound_in_window_++;
    stats_.push_pulls_served++;
    SendReliable(from, LocalState(pp.seq, pp.join, /*response=*/true));
  }
  MergeRemoteState(now, pp);
}

// ---- State transitions -----------------------------------------------------------------------

void SwimCore::AliveNode(absl::Time now, const Alive& a, bool spread) {
  if (a.node == self_id_) {
    const Member& me = self();
    if (a.incarnation < me.incarnation) return;
    if (a.incarnation == me.incarnation && a.address == me.address && a.metadata == me.metadata) {
      return;  // our own news coming back
    }
    // Someone spreads a newer or different "us" (a previous run of this node): refute.
    if (!leaving_) Refute(now, a.incarnation);
    return;
  }
  Member* m = FindMutable(a.node);
  if (m == nullptr) {
    if (nodes_.size() >= config_.max_members) {
      stats_.members_rejected++;
      return;
    }
    Member fresh;
    fresh.id = a.node;
    fresh.address = a.address;
    fresh.incarnation = a.incarnation;
    fresh.state = MemberState::kAlive;
    fresh.metadata = a.metadata;
    fresh.state_changed = now;
    recently_dead_.erase(a.node);
    InsertAtRandom(fresh);
    if (spread) Broadcast(a.node, a, /*alive=*/true);
    Emit(EventType::kJoin, fresh);
    return;
  }
  if (a.incarnation <= m->incarnation) return;
  MemberState old_state = m->state;
  bool metadata_changed = !(m->metadata == a.metadata);
  suspicions_.erase(a.node);
  recently_dead_.erase(a.node);
  m->incarnation = a.incarnation;
  m->address = a.address;
  m->metadata = a.metadata;
  if (old_state != MemberState::kAlive) SetState(*m, MemberState::kAlive, now);
  if (spread) Broadcast(a.node, a, /*alive=*/true);
  if (old_state == MemberState::kDead || old_state == MemberState::kLeft) {
    Emit(EventType::kJoin, *m);
    return;
  }
  if (old_state == MemberState::kSuspect) Emit(EventType::kAlive, *m);
  if (metadata_changed) Emit(EventType::kUpdate, *m);
}

void SwimCore::SuspectNode(absl::Time now, const Suspect& s) {
  Member* m = FindMutable(s.node);
  if (m == nullptr) return;
  if (s.incarnation < m->incarnation) {
    if (s.node == self_id_) AnswerStaleAccusation(s.from);
    return;
  }
  if (auto it = suspicions_.find(s.node); it != suspicions_.end()) {
    if (it->second.Confirm(s.from)) Broadcast(s.node, s, /*alive=*/false);
    return;
  }
  if (m->state != MemberState::kAlive) return;
  if (s.node == self_id_) {
    if (!leaving_) Refute(now, s.incarnation);
    return;
  }
  stats_.suspicions++;
  m->incarnation = s.incarnation;
  SetState(*m, MemberState::kSuspect, now);
  Broadcast(s.node, s, /*alive=*/false);
  // memberlist: k = mult - 2 confirmations wanted, none in clusters too small to give them.
  size_t n = LiveCount();
  int k = config_.suspicion_mult - 2;
  if (static_cast<int>(n) - 2 < k) k = 0;
  absl::Duration min = SuspicionMinTimeout(config_.suspicion_mult, n, config_.probe_interval);
  absl::Duration max = min * config_.suspicion_max_timeout_mult;
  auto [it, inserted] = suspicions_.emplace(s.node, Suspicion(s.from, k, min, max, now));
  it->second.set_next_nudge(now + config_.probe_interval);
  Emit(EventType::kSuspect, *m);
}

void SwimCore::DeadNode(absl::Time now, const Dead& d) {
  Member* m = FindMutable(d.node);
  if (m == nullptr) return;
  if (d.incarnation < m->incarnation) {
    if (d.node == self_id_ && d.from != self_id_) AnswerStaleAccusation(d.from);
    return;
  }
  if (m->state == MemberState::kDead || m->state == MemberState::kLeft) return;
  if (d.node == self_id_) {
    if (!leaving_) Refute(now, d.incarnation);
    return;
  }
  bool left = d.from == d.node;
  suspicions_.erase(d.node);
  m->incarnation = d.incarnation;
  SetState(*m, left ? MemberState::kLeft : MemberState::kDead, now);
  Broadcast(d.node, d, /*alive=*/false);
  if (left) {
    recently_dead_.erase(d.node);
    Emit(EventType::kLeave, *m);
    return;
  }
  stats_.deaths++;
  recently_dead_[d.node] = RecentlyDead{m->address, now};
  Emit(EventType::kDead, *m);
}

void SwimCore::Refute(absl::Time now, uint32_t accused_incarnation) {
  Member& me = Self();
  me.incarnation = std::max(me.incarnation, accused_incarnation) + 1;
  // Lifeguard: being suspected hints that we are the slow one.
  awareness_.ApplyDelta(1);
  stats_.refutations++;
  Broadcast(me.id, Alive{me.incarnation, me.id, me.address, me.metadata}, /*alive=*/true);
}

// An accusation older than our incarnation: we refuted it, but the accuser (who still probes
// us, carrying it) never heard; our "alive" broadcasts may have run out of retransmissions on
// a lossy path. Tell the accuser directly, or it declares us dead at its suspicion timeout.
// One datagram per accusation received, so the reply rate is bounded by the accusations.
void SwimCore::AnswerStaleAccusation(const NodeId& accuser) {
  if (leaving_ || accuser == self_id_) return;
  const Member* to = Find(accuser);
  if (to == nullptr || to->state == MemberState::kLeft) return;
  const Member& me = self();
  stats_.stale_accusations_answered++;
  SendDatagram(to->address, {EncodeMessage(Alive{me.incarnation, me.id, me.address, me.metadata})});
}

void SwimCore::MergeRemoteState(absl::Time now, const PushPull& pp) {
  // A newcomer learning the cluster from its seed need not tell the cluster about itself; in
  // every other sync what we learn is news to our side too (a healed partition), so spread it.
  bool spread = !(pp.join && pp.response);
  for (const PushPullEntry& e : pp.members) {
    switch (e.state) {
      case MemberState::kAlive:
        AliveNode(now, Alive{e.incarnation, e.node, e.address, e.metadata}, spread);
        break;
      case MemberState::kLeft:
        DeadNode(now, Dead{e.incarnation, e.node, e.node});
        break;
      case MemberState::kDead:
      case MemberState::kSuspect:
        // memberlist: another node's "dead" only makes us suspect; the node may refute.
        SuspectNode(now, Suspect{e.incarnation, e.node, pp.source});
        break;
    }
  }
}

// ---- Timers ----------------------------------------------------------------------------------

void SwimCore::ExpireTimers(absl::Time now) {
  std::vector<NodeId> expired;
  for (const auto& [id, s] : suspicions_) {
    if (now >= s.deadline()) expired.push_back(id);
  }
  std::sort(expired.begin(), expired.end());  // flat_hash_map order is not deterministic
  for (const NodeId& id : expired) {
    const Member* m = Find(id);
    if (m == nullptr) continue;
    DeadNode(now, Dead{m->incarnation, id, self_id_});
  }
  std::vector<uint32_t> relays;
  for (const auto& [seq, r] : relays_) {
    if (now >= r.deadline) relays.push_back(seq);
  }
  std::sort(relays.begin(), relays.end());
  for (uint32_t seq : relays) {
    const Relay& r = relays_.at(seq);
    if (r.want_nack) SendDatagram(r.source_address, {EncodeMessage(Nack{r.source_seq})});
    relays_.erase(seq);
  }
  absl::erase_if(push_pulls_in_flight_, [now](const auto& kv) { return now >= kv.second; });
}

// Every suspicion we hold is told to the suspect directly once per probe interval, not only on
// our (awareness-scaled, ring-ordered) probes of it or the few gossip retransmissions: on a
// lossy path the suspect's refutation is what is missing, and a suspect that hears it in time
// refutes (or, having refuted already, answers us with its alive state). Bounded: one datagram
// per suspicion per interval.
void SwimCore::NudgeSuspects(absl::Time now) {
  if (leaving_) return;
  std::vector<NodeId> due;
  for (auto& [id, s] : suspicions_) {
    if (now < s.next_nudge()) continue;
    s.set_next_nudge(now + config_.probe_interval);
    due.push_back(id);
  }
  std::sort(due.begin(), due.end());  // flat_hash_map order is not deterministic
  for (const NodeId& id : due) {
    const Member* m = Find(id);
    if (m == nullptr || m->state != MemberState::kSuspect) continue;
    SendDatagram(m->address, {EncodeMessage(Suspect{m->incarnation, m->id, self_id_})});
  }
}

const Member* SwimCore::NextRoundRobinTarget(absl::Time now) {
  for (size_t checked = 0; checked < nodes_.size(); ++checked) {
    if (probe_index_ >= nodes_.size()) ResetProbeOrder(now);
    const Member& m = nodes_[probe_index_++];
    if (m.id == self_id_ || m.state == MemberState::kDead || m.state == MemberState::kLeft) {
      continue;
    }
    return &m;
  }
  return nullptr;
}

const Member* SwimCore::NextCoordinatedTarget(absl::Time now, size_t slot) {
  size_t live = LiveCount();
  if (live < 2) return nullptr;
  absl::Duration remainder;
  int64_t step = absl::IDivDuration(now - absl::UnixEpoch(), config_.probe_interval, &remainder);
  int64_t pass = step / static_cast<int64_t>(live - 1);
  // Reaping the long dead still happens once per N probes, as in round-robin mode.
  if (slot == 0 && ++probe_index_ >= nodes_.size()) ResetProbeOrder(now);
  if (ring_version_ != view_version_ || ring_pass_ != pass || ring_.size() != live) {
    ring_.clear();
    std::string salt = StrCat(pass, "/");
    for (const Member& m : nodes_) {
      if (m.state != MemberState::kAlive && m.state != MemberState::kSuspect) continue;
      ring_.emplace_back(StableHash(salt, m.id), m.id);
    }
    std::sort(ring_.begin(), ring_.end());
    for (size_t i = 0; i < ring_.size(); ++i) {
      if (ring_[i].second == self_id_) ring_self_ = i;
    }
    ring_version_ = view_version_;
    ring_pass_ = pass;
  }
  size_t m = ring_.size();
  // Slot r probes at offset k + r (M - 1) / R: the R probers of a member sit far apart on the
  // ring, so a contiguous failure (one rack) rarely takes all of them.
  int64_t spread = static_cast<int64_t>(slot * (m - 1) / probes_.size());
  size_t offset = 1 + static_cast<size_t>((step + spread) % static_cast<int64_t>(m - 1));
  return Find(ring_[(ring_self_ + offset) % m].second);
}

absl::Time SwimCore::NextProbeTime(absl::Time now) const {
  absl::Time next = now + awareness_.Scale(config_.probe_interval);
  if (!config_.coordinated_probing) return next;
  // Snap to this node's phase in the step, so that after a failure the member's prober for the
  // next step probes it within about one interval.
  absl::Duration into_step;
  absl::IDivDuration(next - absl::UnixEpoch(), config_.probe_interval, &into_step);
  return next - into_step + probe_phase_;
}

void SwimCore::StartProbe(absl::Time now) {
  bool coordinated = config_.coordinated_probing && !leaving_;
  for (size_t slot = 0; slot < (coordinated ? probes_.size() : 1); ++slot) {
    const Member* target =
        coordinated ? NextCoordinatedTarget(now, slot) : NextRoundRobinTarget(now);
    if (target == nullptr || target->id == self_id_) continue;
    bool duplicate = false;  // a small ring maps several slots to one member
    for (size_t other = 0; other < slot; ++other) {
      duplicate |= probes_[other].active && probes_[other].target == target->id;
    }
    if (duplicate) continue;
    Probe& probe = probes_[slot];
    probe = Probe{};
    probe.active = true;
    probe.target = target->id;
    probe.seq = NextSeq();
    probe.indirect_at = now + awareness_.Scale(config_.probe_timeout);
    probe.deadline = now + awareness_.Scale(config_.probe_interval);
    std::vector<std::string> messages;
    if (target->state == MemberState::kSuspect) {
      // Lifeguard buddy system: the suspect hears of its suspicion directly and can refute now.
      messages.push_back(EncodeMessage(Suspect{target->incarnation, target->id, self_id_}));
    }
    messages.push_back(EncodeMessage(Ping{probe.seq, target->id, self_id_, self().address}));
    stats_.probes_sent++;
    SendDatagram(target->address, std::move(messages));
  }
}

void SwimCore::StartIndirectProbe(absl::Time now, Probe& probe) {
  probe.indirect_sent = true;
  const Member* target = Find(probe.target);
  if (target == nullptr) return;
  Address target_address = target->address;
  for (const Member* relay :
       RandomMembers(config_.indirect_checks, probe.target, /*include_dead=*/false, now)) {
    if (relay->state != MemberState::kAlive) continue;
    probe.expected_nacks++;
    stats_.indirect_probes_sent++;
    SendDatagram(relay->address,
                 {EncodeMessage(IndirectPing{probe.seq, probe.target, target_address, true,
                                             self_id_, self().address})});
  }
  if (config_.tcp_fallback_ping) {
    stats_.tcp_fallback_pings++;
    SendReliable(target_address, Ping{probe.seq, probe.target, self_id_, self().address});
  }
}

void SwimCore::FinishProbe(absl::Time now, Probe& probe) {
  probe.active = false;
  if (now - probe.deadline > config_.probe_interval) {
    // We did not run for a whole interval (paused, starved): the silence is ours, not theirs.
    stats_.probes_abandoned++;
    awareness_.ApplyDelta(1);
    return;
  }
  stats_.probes_failed++;
  // Lifeguard: missing nacks mean our own network or CPU is the problem; without relays to
  // tell us, every failure counts against us.
  int delta = probe.expected_nacks > 0 ? std::max(0, probe.expected_nacks - probe.nacks) : 1;
  awareness_.ApplyDelta(delta);
  const Member* m = Find(probe.target);
  if (m == nullptr || m->state == MemberState::kDead || m->state == MemberState::kLeft) return;
  SuspectNode(now, Suspect{m->incarnation, m->id, self_id_});
}

void SwimCore::Gossip(absl::Time now) {
  if (broadcasts_.size() == 0) return;
  int limit = RetransmitLimit(config_.retransmit_mult, nodes_.size());
  size_t budget = config_.udp_payload_bytes - kPacketHeaderBytes - kCompoundHeaderBytes;
  for (const Member* m :
       RandomMembers(config_.gossip_nodes, self_id_, /*include_dead=*/true, now)) {
    std::vector<std::string> messages = broadcasts_.Take(kCompoundPerMessageBytes, budget, limit);
    if (messages.empty()) return;
    std::string bytes = EncodePacket(messages);
    stats_.packets_out++;
    stats_.bytes_out += bytes.size();
    out_.push_back(OutPacket{m->address, Channel::kDatagram, std::move(bytes)});
  }
}

void SwimCore::PeriodicPushPull(absl::Time now) {
  std::vector<const Member*> peers = RandomMembers(1, self_id_, /*include_dead=*/false, now);
  if (peers.empty() || peers[0]->state != MemberState::kAlive) return;
  SendPushPull(now, peers[0]->address, /*join=*/false);
}

void SwimCore::Reconnect(absl::Time now) {
  for (auto it = recently_dead_.begin(); it != recently_dead_.end();) {
    const Member* m = Find(it->first);
    bool back =
        m != nullptr && (m->state == MemberState::kAlive || m->state == MemberState::kSuspect);
    if (back || now - it->second.since > config_.reconnect_timeout) {
      it = recently_dead_.erase(it);
    } else {
      ++it;
    }
  }
  size_t live = std::max<size_t>(1, LiveCount());
  // Serf's reconnect rule: the cluster as a whole makes about one attempt per dead member per
  // interval, so a long list of truly dead nodes costs little, while two halves that declared
  // each other dead (dead ≈ live) all retry and merge quickly.
  if (!recently_dead_.empty()) {
    double p = std::min(1.0, static_cast<double>(recently_dead_.size()) / live);
    if (rng_.Bernoulli(p)) {
      auto it = std::next(recently_dead_.begin(), rng_.Uniform(recently_dead_.size()));
      SendPushPull(now, it->second.address, /*join=*/false);
    }
  }
  if (seeds_.empty()) return;
  if (live <= 1) {
    for (const Address& seed : seeds_) {
      if (seed != self().address) SendPushPull(now, seed, /*join=*/true);
    }
    return;
  }
  // A seed that is not a live member of our view may be in another partition: sync with one.
  std::vector<Address> missing;
  for (const Address& seed : seeds_) {
    bool known = seed == self().address;
    for (const Member& m : nodes_) {
      if (m.address == seed && m.state != MemberState::kDead && m.state != MemberState::kLeft) {
        known = true;
        break;
      }
    }
    if (!known) missing.push_back(seed);
  }
  if (!missing.empty()) SendPushPull(now, missing[rng_.Uniform(missing.size())], false);
}

void SwimCore::ResetProbeOrder(absl::Time now) {
  // Reap members dead for longer than gossip_to_the_dead_time; the dead stay on the reconnect
  // list so a partition can heal.
  std::vector<Member> kept;
  kept.reserve(nodes_.size());
  for (Member& m : nodes_) {
    bool gone = m.state == MemberState::kDead || m.state == MemberState::kLeft;
    if (gone && m.id != self_id_ && now - m.state_changed > config_.gossip_to_the_dead_time) {
      state_counts_[static_cast<size_t>(m.state)]--;
      continue;
    }
    kept.push_back(std::move(m));
  }
  nodes_ = std::move(kept);
  rng_.Shuffle(nodes_);
  index_.clear();
  for (size_t i = 0; i < nodes_.size(); ++i) index_[nodes_[i].id] = i;
  probe_index_ = 0;
}

// ---- Sending ---------------------------------------------------------------------------------

void SwimCore::SendDatagram(const Address& to, std::vector<std::string> messages) {
  size_t used = kPacketHeaderBytes + kCompoundHeaderBytes;
  for (const std::string& m : messages) used += kCompoundPerMessageBytes + m.size();
  if (used < config_.udp_payload_bytes) {
    int limit = RetransmitLimit(config_.retransmit_mult, nodes_.size());
    for (std::string& extra :
         broadcasts_.Take(kCompoundPerMessageBytes, config_.udp_payload_bytes - used, limit)) {
      messages.push_back(std::move(extra));
    }
  }
  std::string bytes = EncodePacket(messages);
  stats_.packets_out++;
  stats_.bytes_out += bytes.size();
  out_.push_back(OutPacket{to, Channel::kDatagram, std::move(bytes)});
}

void SwimCore::SendReliable(const Address& to, const Message& message) {
  std::string bytes = EncodeSingle(message);
  stats_.packets_out++;
  stats_.bytes_out += bytes.size();
  out_.push_back(OutPacket{to, Channel::kReliable, std::move(bytes)});
}

void SwimCore::SendPushPull(absl::Time now, const Address& to, bool join) {
  if (static_cast<int>(push_pulls_in_flight_.size()) >= config_.max_outbound_push_pulls) return;
  uint32_t seq = NextSeq();
  push_pulls_in_flight_[seq] = now + config_.push_pull_timeout;
  stats_.push_pulls_sent++;
  SendReliable(to, LocalState(seq, join, /*response=*/false));
}

PushPull SwimCore::LocalState(uint32_t seq, bool join, bool response) const {
  PushPull pp;
  pp.seq = seq;
  pp.join = join;
  pp.response = response;
  pp.source = self_id_;
  pp.source_address = self().address;
  pp.members.reserve(nodes_.size());
  for (const Member& m : nodes_) {
    pp.members.push_back(PushPullEntry{m.id, m.address, m.incarnation, m.state, m.metadata});
  }
  return pp;
}

void SwimCore::Broadcast(const NodeId& node, const Message& message, bool alive) {
  broadcasts_.Queue(node, EncodeMessage(message), alive);
}

// ---- Members ---------------------------------------------------------------------------------

const Member* SwimCore::Find(const NodeId& id) const {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : &nodes_[it->second];
}

Member* SwimCore::FindMutable(const NodeId& id) {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : &nodes_[it->second];
}

const Member& SwimCore::self() const { return nodes_[index_.at(self_id_)]; }
Member& SwimCore::Self() { return nodes_[index_.at(self_id_)]; }

void SwimCore::InsertAtRandom(Member member) {
  // memberlist: a new node goes to a random slot so it is probed within about one pass.
  state_counts_[static_cast<size_t>(member.state)]++;
  view_version_++;
  size_t n = nodes_.size();
  index_[member.id] = n;
  nodes_.push_back(std::move(member));
  size_t offset = rng_.Uniform(n + 1);
  if (offset == n) return;
  std::swap(nodes_[offset], nodes_[n]);
  index_[nodes_[offset].id] = offset;
  index_[nodes_[n].id] = n;
}

void SwimCore::SetState(Member& m, MemberState state, absl::Time now) {
  view_version_++;
  state_counts_[static_cast<size_t>(m.state)]--;
  state_counts_[static_cast<size_t>(state)]++;
  m.state = state;
  m.state_changed = now;
}

std::vector<const Member*> SwimCore::RandomMembers(size_t k, const NodeId& exclude,
                                                   bool include_dead, absl::Time now) {
  // memberlist kRandomNodes: up to 3n random draws, filtered, without repeats.
  std::vector<const Member*> out;
  size_t n = nodes_.size();
  for (size_t i = 0; i < 3 * n && out.size() < k; ++i) {
    const Member& m = nodes_[rng_.Uniform(n)];
    if (m.id == self_id_ || m.id == exclude) continue;
    bool gone = m.state == MemberState::kDead || m.state == MemberState::kLeft;
    if (gone && (!include_dead || now - m.state_changed > config_.gossip_to_the_dead_time)) {
      continue;
    }
    if (std::find(out.begin(), out.end(), &m) != out.end()) continue;
    out.push_back(&m);
  }
  return out;
}

size_t SwimCore::LiveCount() const {
  return CountInState(MemberState::kAlive) + CountInState(MemberState::kSuspect);
}

absl::Duration SwimCore::PushPullInterval() const {
  double n = static_cast<double>(LiveCount());
  if (n <= kPushPullScaleThreshold) return config_.push_pull_interval;
  double multiplier = std::ceil(std::log2(n) - std::log2(kPushPullScaleThreshold)) + 1.0;
  return config_.push_pull_interval * multiplier;
}

}  // namespace exa::membership
