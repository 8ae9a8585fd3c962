// The simulators' network (docs/testing.md): which simulated node listens at an address, and
// how long a packet takes to get there, or whether it is lost. Each simulator keeps its own
// reachability rule (a partition, a killed node) and checks it before asking.
//
// Draws come from the simulator's seeded Random, in the order each simulator drew them before
// this was shared — the loss first (only when there is any, and only for datagrams), then the
// latency — so a seed's run is bit-identical.
// Thread-safety: none; a simulation runs on one thread.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>

#include "absl/time/time.h"
#include "common/random.h"
#include "membership/member.h"
#include "membership/messages.h"

namespace exa::sim {

// A packet on its way: who sent it, on which channel, and its bytes.
struct InFlight {
  int from = -1;
  membership::Channel channel = membership::Channel::kDatagram;
  std::string bytes;
};

// One-way delay: unit_us × (base + jitter × U[0, 1)) microseconds, computed in that order (the
// same double arithmetic as each simulator used, for identical figures).
struct LinkModel {
  double unit_us = 1;  // what base and jitter count in: 1 for microseconds, 1000 for milliseconds
  double base = 0;
  double jitter = 0;
  // A reliable (stream) exchange costs this on top of the latency: connection setup.
  absl::Duration reliable_setup = absl::ZeroDuration();
  // The chance a datagram is lost; reliable exchanges are never lost, only cut.
  double loss = 0;
};

class SimNetwork {
 public:
  explicit SimNetwork(LinkModel link) : link_(link) {}

  // Node `node` listens at `address`.
  void Listen(const membership::Address& address, int node) { by_address_[address] = node; }
  // The node listening at `address`, or nullopt.
  std::optional<int> NodeAt(const membership::Address& address) const;

  // One latency draw.
  absl::Duration Latency(Random& rng) const;
  // How long a packet on `channel` sent now takes to arrive; nullopt when it is lost.
  std::optional<absl::Duration> Transit(membership::Channel channel, Random& rng) const;

 private:
  LinkModel link_;
  std::unordered_map<membership::Address, int> by_address_;
};

}  // namespace exa::sim
