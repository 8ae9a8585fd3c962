// `exaserve-cli routing`: an operator's view of how the gateways route (docs/reference/cli.md),
// read from each gateway's /metrics (docs/reference/metrics.md): per gateway its policy, the
// routing decisions and how many landed on a replica holding part of the prompt, the prefix hit
// ratio it expected, and its estimated against its actual time to first token; then the
// decisions summed by policy. The gateways are the live members with the gateway role in the
// membership view of the node at --addr, read at the HTTP address each advertises; --metrics
// reads one /metrics address instead (a node with metrics.listen serves it apart).
//
// Exit codes: 0 when at least one gateway answered (the others are listed unavailable), 1 when
// the node at --addr or every gateway could not be reached, 2 for bad flags.
#pragma once

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "tools/cli_common.h"

namespace exa::tools {

struct RoutingCommand {
  CLI::App* app = nullptr;
  std::string gateway;  // --gateway: only this node id
  std::string metrics;  // --metrics HOST:PORT: this /metrics address, no membership lookup
};

void AddRoutingCommand(CLI::App& app, RoutingCommand* command);

// The exit code when `routing` was given, else nullopt.
std::optional<int> RunRoutingCommand(const RoutingCommand& command, bool json,
                                     const ClusterAccess& cluster);

}  // namespace exa::tools
