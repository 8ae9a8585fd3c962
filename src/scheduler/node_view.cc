#include "scheduler/node_view.h"

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

}  // namespace exa::scheduler
