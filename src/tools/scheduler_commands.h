// exaserve-cli's scheduler commands: `apply -f FILE`, `get [NAME]`, `describe NAME`,
// `delete NAME`, `rollout status|pause|resume|promote|rollback NAME`, `autoscale status NAME` and
// `node cordon|uncordon|drain|taint|untaint|ops` — against any scheduler node
// (--addr), which stores and replicates the change (scheduler/scheduler_service.h).
//
// `apply` and `delete` may name the resource version the caller read (--resource-version, or
// metadata.resourceVersion in the file, as `get -o yaml` prints it): the scheduler refuses the
// write with ABORTED when the spec changed since (spec_versions.h).
//
// Exit codes: 0 success, 1 the node could not be reached or refused (a stale resource version
// included), 2 usage or an invalid spec (the error names the file, line, field path, value and
// what is allowed).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "tools/model_commands.h"

namespace exa::tools {

struct SchedulerCommands {
  CLI::App* apply = nullptr;
  CLI::App* get = nullptr;
  CLI::App* describe = nullptr;
  CLI::App* del = nullptr;
  CLI::App* cordon = nullptr;
  CLI::App* uncordon = nullptr;
  CLI::App* drain = nullptr;
  CLI::App* taint = nullptr;
  CLI::App* untaint = nullptr;
  CLI::App* ops = nullptr;
  CLI::App* rollout = nullptr;
  CLI::App* autoscale = nullptr;
  std::string rollout_command;
  std::string autoscale_command;
  std::string file;
  bool dry_run = false;
  std::string name;
  std::string node;
  std::string taint_value;
  std::string output = "yaml";
  std::string resource_version;  // --resource-version of apply or delete, checked when run
  CLI::Option* apply_version = nullptr;
  CLI::Option* delete_version = nullptr;
};

// `node_cmd` is the existing `node` subcommand the node operations join.
// The alive schedulers in the membership view of the node at `addr` (node id -> gRPC address,
// so in id order; the first is the reconciler); empty when it knows none or cannot be asked
// within `timeout`.
std::map<std::string, std::string> AliveSchedulers(const std::string& addr, absl::Duration timeout);

void AddSchedulerCommands(CLI::App& app, CLI::App& node_cmd, SchedulerCommands* commands);

// The exit code when one of these commands was given, else nullopt.
std::optional<int> RunSchedulerCommands(const SchedulerCommands& commands, bool json,
                                        const ClusterAccess& cluster);

}  // namespace exa::tools
