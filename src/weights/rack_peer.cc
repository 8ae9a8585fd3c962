#include "weights/rack_peer.h"

#include <algorithm>

#include "common/strings.h"

namespace exa::weights {

RackPeerChoice PickRackPeer(const std::vector<MemberView>& members, const std::string& rack) {
  const MemberView* best = nullptr;
  int storage_elsewhere = 0, storage_not_alive = 0, storage_no_grpc = 0;
  for (const MemberView& m : members) {
    if (std::find(m.roles.begin(), m.roles.end(), "storage") == m.roles.end()) continue;
    if (m.rack != rack) {
      ++storage_elsewhere;
      continue;
    }
    // Suspect may be a pause or a dead node: a pull should not start on it.
    if (m.state != "alive") {
      ++storage_not_alive;
      continue;
    }
    if (m.grpc_address.empty()) {
      ++storage_no_grpc;
      continue;
    }
    if (best == nullptr || m.node_id < best->node_id) best = &m;
  }
  if (best != nullptr) return {best->grpc_address, best->node_id, ""};
  const std::string where = rack.empty() ? "without a rack" : StrCat("in rack \"", rack, "\"");
  RackPeerChoice none;
  if (storage_not_alive > 0) {
    none.reason = StrCat("the storage node ", where, " is not alive");
  } else if (storage_no_grpc > 0) {
    none.reason = StrCat("the storage node ", where, " advertises no gRPC address");
  } else {
    none.reason = StrCat("no storage node ", where, " (", storage_elsewhere, " in other racks, ",
                         members.size(), " members)");
  }
  return none;
}

}  // namespace exa::weights
