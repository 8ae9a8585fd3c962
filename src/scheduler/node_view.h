// From the membership view to the reconciler's inputs: a member's gossiped metadata (rack,
// NVLink domain, GPU summary, taints, pinned roles) as a NodeInventory, and its SWIM state as a
// NodeLiveness with the time it entered it. The node agent's report (boot id, replicas, staged
// weights) is merged in by the caller, which owns the RPCs.
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "membership/member.h"
#include "scheduler/reconciler.h"

namespace exa::scheduler {

// The GPU summary's model on a node that offers its host memory budget to cpu/sim replicas as one
// device.
inline constexpr std::string_view kCpuDeviceModel = "cpu";

NodeInventory InventoryFromMember(const membership::Member& member);
NodeLiveness LivenessFromState(membership::MemberState state);

// Inventory and liveness of `member` written into `status`, keeping its last report.
void UpdateFromMember(const membership::Member& member, NodeStatus& status);

// How long the scheduler remembers a node that is dead or left (and gone from the view): its
// replicas' generations must outlive any deadGrace so a returning node's stale replicas lose.
inline constexpr absl::Duration kForgetDeadAfter = absl::Hours(1);

// Brings the scheduler's node table (id → status) up to date with the membership view. SWIM
// forgets a dead member after gossip_to_the_dead_time (30 s), which can be shorter than a spec's
// deadGrace: a node missing from the view keeps its last status here (dead since it died), so
// its replicas count until their grace has passed and their generations are not forgotten.
// Entries dead or left for longer than kForgetDeadAfter are dropped.
void MergeView(absl::Time now, const std::vector<membership::Member>& members,
               std::map<std::string, NodeStatus>& nodes);

}  // namespace exa::scheduler
