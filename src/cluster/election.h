// Role election: a pure function from the membership view to who does what
// (docs/architecture.md#roles). Every node computes it from its own view, so the same view must
// give the same answer on every node: the result depends only on the set of (id, rack, pinned
// roles), never on order, time or randomness. Pinned nodes get exactly their pinned roles. Auto
// nodes fill, in this order:
//   storage    one per rack (the rack's weight-cache peer, docs/architecture.md#weights);
//   scheduler  scheduler_min..scheduler_max, about one per nodes_per_scheduler, odd for
//              majorities, spread over racks;
//   gateway    gateway_min..gateway_max, about one per nodes_per_gateway, spread over racks;
//   observer   up to observer_max, one per nodes_per_observer;
// at most one control role per auto node while free auto nodes remain (docs/architecture.md#roles:
// co-located gateway + scheduler starved heartbeats), the rest inference. A lone node takes every
// role; when control roles leave no inference node, auto nodes also serve inference. Within a rack
// the pick is by rendezvous hashing of (role, id), so a node joining or leaving moves as few roles
// as possible.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cluster/role.h"

namespace exa::cluster {

struct ElectionConfig {
  int scheduler_min = 3;
  int scheduler_max = 12;
  int nodes_per_scheduler = 24;  // 256 nodes → 11 (docs/architecture.md#roles: 8–12 schedulers)
  int gateway_min = 1;
  int gateway_max = 16;
  int nodes_per_gateway = 16;  // 256 nodes → 16 (docs/architecture.md#roles: 12–16 gateways)
  int storage_per_rack = 1;    // docs/architecture.md#weights: one rack cache tier
  int observer_max = 2;
  int nodes_per_observer = 64;  // 64 nodes → 1, 128+ → 2
};

// One live member as election sees it.
struct ElectionNode {
  std::string id;
  std::string rack;
  RoleSet pinned;  // empty: auto
};

using Assignment = std::map<std::string, RoleSet>;

Assignment ElectRoles(const std::vector<ElectionNode>& nodes, const ElectionConfig& config);

// Targets ElectRoles aims for with `n` live nodes (exposed for tests and the CLI).
int SchedulerTarget(size_t n, const ElectionConfig& config);
int GatewayTarget(size_t n, const ElectionConfig& config);
int ObserverTarget(size_t n, const ElectionConfig& config);

}  // namespace exa::cluster
