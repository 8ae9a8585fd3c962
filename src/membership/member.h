// What the membership layer knows about a node: its stable id, where to reach it, its SWIM state
// and incarnation, and the metadata it gossips about itself (docs/architecture.md#roles,
// docs/architecture.md#bring-up).
//
// The id is stable across restarts and address changes (a UUID kept in the data dir); the
// address is only how to reach the node now. A node that restarts keeps its id and comes back
// with a higher incarnation, which is a restart, not a recovery (docs/architecture.md#consistency).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"

namespace exa::membership {

using NodeId = std::string;
// "host:port" as the transport understands it.
using Address = std::string;

enum class MemberState : uint8_t { kAlive = 0, kSuspect = 1, kDead = 2, kLeft = 3 };
inline constexpr int kNumMemberStates = 4;
std::string_view MemberStateName(MemberState state);

struct GpuSummary {
  uint16_t count = 0;
  uint32_t memory_mib_each = 0;
  std::string model;  // e.g. "H100-SXM"
  bool operator==(const GpuSummary&) const = default;
};

// A compact summary of the replicas a node hosts; the full load state travels on the load stream
// to gateways, not in gossip (docs/architecture.md#flows).
struct ReplicaSummary {
  uint16_t hosted = 0;
  uint16_t ready = 0;
  bool operator==(const ReplicaSummary&) const = default;
};

// Node metadata, versioned by the incarnation: an update bumps the owner's incarnation so it
// spreads like any alive message. Encoded size is bounded by kMaxMetadataBytes.
struct Metadata {
  std::vector<std::string> roles;  // pinned roles; empty or {"auto"} lets election decide
  std::string rack;
  std::string nvlink_domain;
  GpuSummary gpus;
  std::vector<std::string> taints;
  std::string build_version;
  ReplicaSummary replicas;
  // Service ports on the host of the member's gossip address (0: not serving). Gateways find
  // node agents and fetchers find storage peers through these.
  uint16_t grpc_port = 0;
  uint16_t http_port = 0;
  bool operator==(const Metadata&) const = default;
};

// memberlist MetaMaxSize: metadata must fit in one gossip packet beside other messages.
inline constexpr size_t kMaxMetadataBytes = 512;
// Upper bounds the decoder enforces on identifiers (bad input must not allocate without bound).
inline constexpr size_t kMaxNodeIdBytes = 128;
inline constexpr size_t kMaxAddressBytes = 256;

// The host part of "host:port" (brackets kept for IPv6 literals).
std::string_view AddressHost(std::string_view address);

struct Member {
  NodeId id;
  Address address;
  uint32_t incarnation = 0;
  MemberState state = MemberState::kAlive;
  Metadata metadata;
  absl::Time state_changed = absl::InfinitePast();
};

enum class EventType : uint8_t { kJoin, kUpdate, kSuspect, kAlive, kDead, kLeave };
std::string_view EventTypeName(EventType type);

// What subscribers are told. kAlive means a suspect refuted; kJoin covers a new node and one
// coming back from dead or left; kUpdate is new metadata from a live node.
struct Event {
  EventType type;
  Member member;  // the member as it is after the change
};

}  // namespace exa::membership
