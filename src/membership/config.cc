#include "membership/config.h"

#include "common/strings.h"

namespace exa::membership {

Config Config::Wan() {
  Config c;
  c.probe_interval = absl::Seconds(5);            // memberlist WAN default
  c.probe_timeout = absl::Seconds(3);             // memberlist WAN default
  c.suspicion_mult = 6;                           // memberlist WAN default
  c.gossip_interval = absl::Milliseconds(500);    // memberlist WAN default
  c.gossip_nodes = 4;                             // memberlist WAN default
  c.gossip_to_the_dead_time = absl::Seconds(60);  // memberlist WAN default
  c.push_pull_interval = absl::Seconds(60);       // memberlist WAN default
  c.push_pull_timeout = absl::Seconds(30);        // memberlist WAN TCPTimeout
  c.reconnect_interval = absl::Seconds(30);
  return c;
}

namespace {

absl::Status Positive(absl::Duration d, std::string_view name) {
  if (d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        StrCat("membership.", name, " ", absl::FormatDuration(d), ": must be positive"));
  }
  return absl::OkStatus();
}

absl::Status InRange(int64_t v, int64_t lo, int64_t hi, std::string_view name) {
  if (v < lo || v > hi) {
    return absl::InvalidArgumentError(
        StrCat("membership.", name, " ", v, ": must be in [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Config::Validate() const {
  if (auto s = Positive(probe_interval, "probe_interval"); !s.ok()) return s;
  if (auto s = Positive(probe_timeout, "probe_timeout"); !s.ok()) return s;
  if (probe_timeout >= probe_interval) {
    return absl::InvalidArgumentError(
        StrCat("membership.probe_timeout ", absl::FormatDuration(probe_timeout),
               ": must be shorter than probe_interval ", absl::FormatDuration(probe_interval)));
  }
  if (auto s = Positive(gossip_interval, "gossip_interval"); !s.ok()) return s;
  if (auto s = Positive(push_pull_interval, "push_pull_interval"); !s.ok()) return s;
  if (auto s = Positive(push_pull_timeout, "push_pull_timeout"); !s.ok()) return s;
  if (auto s = Positive(reconnect_interval, "reconnect_interval"); !s.ok()) return s;
  if (auto s = Positive(join_retry_interval, "join_retry_interval"); !s.ok()) return s;
  if (auto s = InRange(indirect_checks, 0, 16, "indirect_checks"); !s.ok()) return s;
  if (auto s = InRange(probe_redundancy, 1, 3, "probe_redundancy"); !s.ok()) return s;
  if (auto s = InRange(suspicion_mult, 1, 64, "suspicion_mult"); !s.ok()) return s;
  if (auto s = InRange(suspicion_max_timeout_mult, 1, 64, "suspicion_max_timeout_mult"); !s.ok()) {
    return s;
  }
  if (auto s = InRange(awareness_max, 0, 64, "awareness_max"); !s.ok()) return s;
  if (auto s = InRange(retransmit_mult, 1, 64, "retransmit_mult"); !s.ok()) return s;
  if (auto s = InRange(gossip_nodes, 1, 64, "gossip_nodes"); !s.ok()) return s;
  if (auto s = InRange(static_cast<int64_t>(udp_payload_bytes), 576, 65507, "udp_payload_bytes");
      !s.ok()) {
    return s;
  }
  if (auto s = InRange(max_outbound_push_pulls, 1, 1024, "max_outbound_push_pulls"); !s.ok()) {
    return s;
  }
  if (auto s = InRange(static_cast<int64_t>(max_members), 1, 65535, "max_members"); !s.ok()) {
    return s;
  }
  return absl::OkStatus();
}

}  // namespace exa::membership
