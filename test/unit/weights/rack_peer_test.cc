// The CLI's rack peer choice: the alive storage node of the asking node's rack, the same one the
// daemon picks (lowest id), and a reason naming what is missing when there is none.
#include <catch2/catch.hpp>

#include "weights/rack_peer.h"

namespace exa::weights {
namespace {

MemberView Member(const std::string& id, const std::string& rack, std::vector<std::string> roles,
                  const std::string& state = "alive") {
  return {id, state, std::move(roles), rack, id + ".example:7070"};
}

TEST_CASE("Rack peer: the storage node of the same rack, not another rack's", "[weights]") {
  std::vector<MemberView> members = {
      Member("n1", "r1", {"inference"}),
      Member("s2", "r2", {"storage"}),
      Member("s1", "r1", {"storage", "gateway"}),
  };
  RackPeerChoice c = PickRackPeer(members, "r1");
  CHECK(c.grpc_address == "s1.example:7070");
  CHECK(c.node_id == "s1");
  CHECK(PickRackPeer(members, "r2").grpc_address == "s2.example:7070");
}

TEST_CASE("Rack peer: the lowest alive node id wins, as the daemon picks", "[weights]") {
  std::vector<MemberView> members = {
      Member("s9", "r1", {"storage"}),
      Member("s3", "r1", {"storage"}),
      Member("s0", "r1", {"storage"}, "suspect"),
      Member("s1", "r1", {"storage"}, "dead"),
  };
  CHECK(PickRackPeer(members, "r1").node_id == "s3");
}

TEST_CASE("Rack peer: none gives a reason the CLI prints before using the origin", "[weights]") {
  SECTION("no storage node in the rack") {
    RackPeerChoice c =
        PickRackPeer({Member("n1", "r1", {"inference"}), Member("s2", "r2", {"storage"})}, "r1");
    CHECK(c.grpc_address.empty());
    CHECK(c.reason == "no storage node in rack \"r1\" (1 in other racks, 2 members)");
  }
  SECTION("the rack's storage node is down") {
    RackPeerChoice c = PickRackPeer({Member("s1", "r1", {"storage"}, "dead")}, "r1");
    CHECK(c.grpc_address.empty());
    CHECK(c.reason == "the storage node in rack \"r1\" is not alive");
  }
  SECTION("the storage node does not serve gRPC") {
    MemberView m = Member("s1", "r1", {"storage"});
    m.grpc_address.clear();
    CHECK(PickRackPeer({m}, "r1").reason ==
          "the storage node in rack \"r1\" advertises no gRPC address");
  }
  SECTION("nodes without a rack form one, as in the daemon") {
    CHECK(PickRackPeer({Member("s1", "", {"storage"})}, "").node_id == "s1");
    CHECK(PickRackPeer({Member("s1", "r1", {"storage"})}, "").reason ==
          "no storage node without a rack (1 in other racks, 1 members)");
  }
}

}  // namespace
}  // namespace exa::weights
