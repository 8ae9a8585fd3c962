// exaserve-cli's cluster-at-a-glance commands (docs/architecture.md#monitoring-and-alerts):
//
//   status   the node at --addr (id, state, roles, rack, version, uptime, addresses), then the
//            cluster as its membership view shows it — nodes by role and rack with state, GPUs,
//            replicas and taints — the deployments (ready/desired, model@version, rollout wave)
//            from a scheduler, and the alerts firing on an observer; --json for all of it
//   alerts   pending, firing and recently resolved alerts of an observer: the node at --addr,
//            or an observer found through its membership view
//   routing  how the gateways route, from their /metrics (routing_command.h)
//
// Exit codes: 0 success, 1 the node at --addr (or, for alerts, every observer) could not be
// reached. Parts of `status` that come from other nodes are shown as unavailable, not failed.
#pragma once

#include <optional>
#include <vector>

#include "CLI/CLI.hpp"
#include "exaserve/v1/admin.pb.h"
#include "tools/model_commands.h"
#include "tools/routing_command.h"

namespace exa::tools {

struct ClusterCommands {
  CLI::App* status = nullptr;
  CLI::App* alerts = nullptr;
  bool node_only = false;  // status --node: only the node at --addr (the old output)
  RoutingCommand routing;
};

void AddClusterCommands(CLI::App& app, ClusterCommands* commands);

// The exit code when one of these commands was given, else nullopt.
// `exaserve-cli members`: one row per member by node id (aligned columns), or a JSON array.
void PrintMemberList(std::vector<exaserve::v1::MemberInfo> members, bool as_json);

std::optional<int> RunClusterCommands(const ClusterCommands& commands, bool json,
                                      const ClusterAccess& cluster);

}  // namespace exa::tools
