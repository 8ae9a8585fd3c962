// Tunables of the SWIM + Lifeguard core. Defaults are HashiCorp memberlist's
// DefaultLANConfig(); Wan() is its DefaultWANConfig(). Every bound the core keeps (payload, state
// size, concurrent syncs, queued broadcasts) is here, so nothing grows without a limit
// (docs/architecture.md#module-map rule 5).
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace exa::membership {

struct Config {
  // Failure detection.
  absl::Duration probe_interval = absl::Seconds(1);        // memberlist LAN default
  absl::Duration probe_timeout = absl::Milliseconds(500);  // memberlist LAN default
  int indirect_checks = 3;                                 // memberlist LAN default
  // A TCP ("reliable") ping alongside the indirect probes catches UDP-only faults.
  bool tcp_fallback_ping = true;
  // Coordinated probe order: every node orders the live members the same way (a hash of the id,
  // reshuffled each pass) and at step floor(now / probe_interval) probes the member k places
  // after itself, k = 1 + step mod (M - 1). With agreeing views and clocks (NTP) every member is
  // probed exactly once per interval, so a failure is noticed within ~2 intervals instead of
  // SWIM's exponential tail; with skew or differing views it degrades to random order. Off:
  // memberlist's per-node shuffled round-robin.
  bool coordinated_probing = true;
  // With coordinated probing, how many distinct members probe each member per interval (at
  // ring offsets k and k + (M - 1) / r). With 1, a member whose scheduled prober failed at the
  // same time (a rack, a power domain, a batch of kills) waits one more interval to be
  // suspected; with 2 that needs both probers down. Costs one more ping/ack pair per interval.
  int probe_redundancy = 2;
  int suspicion_mult = 4;              // memberlist LAN default
  int suspicion_max_timeout_mult = 6;  // memberlist default (Lifeguard)
  int awareness_max = 8;               // Lifeguard: health score 0..8 scales by (score + 1)

  // Dissemination.
  int retransmit_mult = 4;                                   // memberlist LAN default
  absl::Duration gossip_interval = absl::Milliseconds(200);  // memberlist LAN default
  int gossip_nodes = 3;                                      // memberlist LAN default
  // Dead nodes still receive gossip this long, so they can learn of their death and refute.
  absl::Duration gossip_to_the_dead_time = absl::Seconds(30);  // memberlist LAN default
  size_t udp_payload_bytes = 1400;  // memberlist UDPBufferSize: fits a 1500-byte MTU
  size_t max_queued_broadcasts = 8192;

  // Anti-entropy.
  absl::Duration push_pull_interval = absl::Seconds(30);  // memberlist LAN default
  absl::Duration push_pull_timeout = absl::Seconds(10);   // memberlist TCPTimeout (LAN)
  int max_outbound_push_pulls = 4;
  // memberlist maxPushPullRequests is 128 concurrent; we bound inbound syncs per second.
  int max_inbound_push_pulls_per_second = 32;
  size_t max_push_pull_bytes = size_t{8} << 20;
  size_t max_members = 16384;

  // Partition healing: retry recently dead members and seeds (memberlist never did; Serf's
  // reconnect loop is the model: 30 s there, shorter here so halves merge within a minute).
  absl::Duration reconnect_interval = absl::Seconds(10);
  absl::Duration reconnect_timeout = absl::Hours(6);
  // A node alone in its view with seeds to join (its first join was lost, or the seeds were not
  // up yet) asks them again this often, rather than waiting for the reconnect loop.
  absl::Duration join_retry_interval = absl::Seconds(1);

  static Config Lan() { return Config{}; }
  // memberlist DefaultWANConfig.
  static Config Wan();

  absl::Status Validate() const;
};

}  // namespace exa::membership
