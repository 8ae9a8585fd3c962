// From the membership view to the reconciler's inputs: a member's gossiped metadata (rack,
// NVLink domain, GPU summary, taints, pinned roles) as a NodeInventory, and its SWIM state as a
// NodeLiveness with the time it entered it. The node agent's report (boot id, replicas, staged
// weights) is merged in by the caller, which owns the RPCs.
//
// Thread safety: pure functions.
#pragma once

#include "membership/member.h"
#include "scheduler/reconciler.h"

namespace exa::scheduler {

NodeInventory InventoryFromMember(const membership::Member& member);
NodeLiveness LivenessFromState(membership::MemberState state);

// Inventory and liveness of `member` written into `status`, keeping its last report.
void UpdateFromMember(const membership::Member& member, NodeStatus& status);

}  // namespace exa::scheduler
