// Which storage node serves a rack, from a membership view a process outside the daemon got over
// Admin.Members (the CLI's `model pull|sync` without --rack-cache). The daemon picks its own
// prestage peer the same way (daemon/weights_role.h FindRackPeer): alive, storage role, a gRPC
// address, same rack, lowest node id, so a rack's CLI pulls and node starts land on one peer and
// the origin serves each chunk to the rack once.
//
// Pure: no I/O, no clock; the caller converts the proto.
#pragma once

#include <string>
#include <vector>

namespace exa::weights {

// One member as Admin.Members reports it.
struct MemberView {
  std::string node_id;
  std::string state;  // "alive", "suspect", "dead" or "left"
  std::vector<std::string> roles;
  std::string rack;
  std::string grpc_address;  // host:port; empty when the member does not advertise gRPC
};

struct RackPeerChoice {
  std::string grpc_address;  // empty: no storage node serves the rack
  std::string node_id;
  // Why nothing was chosen, for the message that says the pull goes to the origin (the CLI
  // fills in how a chosen peer was found).
  std::string reason;
};

// The storage peer of `rack` among `members`. A node at --addr that is itself the rack's storage
// node is a fine answer: the CLI pulls into its own cache dir, not the node's.
RackPeerChoice PickRackPeer(const std::vector<MemberView>& members, const std::string& rack);

}  // namespace exa::weights
