#include "scheduler/node_view.h"

#include <set>

#include "cluster/role.h"

namespace exa::scheduler {

NodeInventory InventoryFromMember(const membership::Member& m) {
  NodeInventory inv;
  inv.id = m.id;
  inv.rack = m.metadata.rack;
  inv.roles = cluster::ParseRoleList(m.metadata.roles);
  // A node with no pinned role is elected; until the scheduler wires the election in, it counts
  // as an inference node.
  if (inv.roles.empty()) inv.roles.Add(cluster::Role::kInference);
  inv.taints = m.metadata.taints;
  if (m.metadata.gpus.model == kCpuDeviceModel) inv.device_kind = "cpu";
  // Gossip carries a summary: every GPU alike and in the node's NVLink domain. A summary that
  // contradicts itself (GPUs without memory, or too many) fails ValidateInventory in placement.
  inv.gpus.assign(m.metadata.gpus.count,
                  GpuDevice{uint64_t{m.metadata.gpus.memory_mib_each} << 20,
                            m.metadata.nvlink_domain.empty() ? m.id : m.metadata.nvlink_domain});
  return inv;
}

NodeLiveness LivenessFromState(membership::MemberState state) {
  switch (state) {
    case membership::MemberState::kAlive:
      return NodeLiveness::kAlive;
    case membership::MemberState::kSuspect:
      return NodeLiveness::kSuspect;
    case membership::MemberState::kDead:
      return NodeLiveness::kDead;
    case membership::MemberState::kLeft:
      return NodeLiveness::kLeft;
  }
  return NodeLiveness::kDead;
}

void UpdateFromMember(const membership::Member& member, NodeStatus& status) {
  status.inventory = InventoryFromMember(member);
  status.liveness = LivenessFromState(member.state);
  status.liveness_since = member.state_changed;
}

void MergeView(absl::Time now, const std::vector<membership::Member>& members,
               std::map<std::string, NodeStatus>& nodes) {
  std::set<std::string> seen;
  for (const membership::Member& m : members) {
    UpdateFromMember(m, nodes[m.id]);
    seen.insert(m.id);
  }
  for (auto it = nodes.begin(); it != nodes.end();) {
    NodeStatus& st = it->second;
    if (!seen.count(it->first) &&
        (st.liveness == NodeLiveness::kAlive || st.liveness == NodeLiveness::kSuspect)) {
      // Gone from the view without a death seen here (a view rebuilt after a restart of this
      // scheduler, say): dead from now, so the grace still runs in full.
      st.liveness = NodeLiveness::kDead;
      st.liveness_since = now;
    }
    bool gone = st.liveness == NodeLiveness::kDead || st.liveness == NodeLiveness::kLeft;
    if (!seen.count(it->first) && gone && now - st.liveness_since > kForgetDeadAfter) {
      it = nodes.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace exa::scheduler
