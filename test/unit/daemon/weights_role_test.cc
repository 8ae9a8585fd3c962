// A node finds its rack's storage peer through membership: alive, same rack, storage, serving
// gRPC, not itself; every node of the rack picks the same one (the lowest id).
#include <catch2/catch.hpp>

#include "daemon/weights_role.h"

namespace exa::daemon {
namespace {

membership::Member Storage(std::string id, std::string rack, uint16_t grpc_port,
                           membership::MemberState state = membership::MemberState::kAlive) {
  membership::Member m;
  m.id = std::move(id);
  m.address = "10.0.0." + std::to_string(m.id.size()) + ":7946";
  m.state = state;
  m.metadata.rack = std::move(rack);
  m.metadata.roles = {"storage"};
  m.metadata.grpc_port = grpc_port;
  return m;
}

bool PinnedStorage(const membership::Member& m) { return HasRole(m.metadata.roles, "storage"); }

TEST_CASE("The rack's storage peer is found through membership", "[weights]") {
  std::vector<membership::Member> members = {
      Storage("other-rack", "r2", 7070),
      Storage("dead", "r1", 7070, membership::MemberState::kDead),
      Storage("no-grpc", "r1", 0),
      Storage("zz-peer", "r1", 7071),
      Storage("self", "r1", 7070),
      Storage("b-peer", "r1", 7072),
  };
  CHECK(FindRackPeer(members, "self", "r1", PinnedStorage) == "10.0.0.6:7072");
  members.back().metadata.roles = {"inference"};
  CHECK(FindRackPeer(members, "self", "r1", PinnedStorage) == "10.0.0.7:7071");
  CHECK(FindRackPeer(members, "self", "r3", PinnedStorage).empty());
  // An elected storage role counts as well as a pinned one.
  CHECK(FindRackPeer(members, "self", "r1", [](const membership::Member& m) {
          return m.id == "b-peer";
        }) == "10.0.0.6:7072");
}

}  // namespace
}  // namespace exa::daemon
