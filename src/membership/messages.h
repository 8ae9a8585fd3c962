// The SWIM messages as plain structs. Only codec.cc knows how they look on the wire; the core
// and the simulator work with these (docs/architecture.md#module-map rule 2).
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "membership/member.h"

namespace exa::membership {

// How a packet travels: kDatagram is UDP (may be lost, bounded by udp_payload_bytes);
// kReliable is a TCP exchange (push-pull, the fallback ping and its ack).
enum class Channel : uint8_t { kDatagram = 0, kReliable = 1 };

// A direct probe. `target` lets a node that took over an address ignore probes for the old one.
struct Ping {
  uint32_t seq = 0;
  NodeId target;
  NodeId source;
  Address source_address;
  bool operator==(const Ping&) const = default;
};

// Ask the receiver to probe `target` for us and forward the ack (SWIM ping-req). With
// `want_nack` the relay answers Nack when the target stays silent (Lifeguard).
struct IndirectPing {
  uint32_t seq = 0;
  NodeId target;
  Address target_address;
  bool want_nack = false;
  NodeId source;
  Address source_address;
  bool operator==(const IndirectPing&) const = default;
};

struct Ack {
  uint32_t seq = 0;
  bool operator==(const Ack&) const = default;
};

struct Nack {
  uint32_t seq = 0;
  bool operator==(const Nack&) const = default;
};

struct Suspect {
  uint32_t incarnation = 0;
  NodeId node;
  NodeId from;
  bool operator==(const Suspect&) const = default;
};

struct Alive {
  uint32_t incarnation = 0;
  NodeId node;
  Address address;
  Metadata metadata;
  bool operator==(const Alive&) const = default;
};

// `from == node` announces a graceful leave.
struct Dead {
  uint32_t incarnation = 0;
  NodeId node;
  NodeId from;
  bool operator==(const Dead&) const = default;
};

struct PushPullEntry {
  NodeId node;
  Address address;
  uint32_t incarnation = 0;
  MemberState state = MemberState::kAlive;
  Metadata metadata;
  bool operator==(const PushPullEntry&) const = default;
};

// Full-state exchange. A request is answered with a response carrying the receiver's state.
struct PushPull {
  uint32_t seq = 0;
  bool join = false;
  bool response = false;
  NodeId source;
  Address source_address;
  std::vector<PushPullEntry> members;
  bool operator==(const PushPull&) const = default;
};

using Message = std::variant<Ping, IndirectPing, Ack, Nack, Suspect, Alive, Dead, PushPull>;

}  // namespace exa::membership
