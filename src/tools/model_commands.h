// `exaserve-cli model ...`: publish, pull, sync, verify, ls, rm, pin and unpin
// (docs/architecture.md#weights). Kept apart from exaserve_cli.cc's main() so the weight commands
// read as one unit.
//
// Exit codes: 0 success, 1 the operation failed (a tier unreachable, bad chunks found),
// 2 usage (bad flags, a malformed model name).
#pragma once

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "tools/cli_common.h"

namespace exa::tools {

struct ModelCommandOptions {
  std::string model;      // N or N:V
  std::string cache_dir;  // default: the daemon's default cache dir
  std::string source = "auto";
  std::string target = "local-nvme";
  std::string rack_cache;  // host:port of the rack's storage peer
  std::string origin;      // host:port of the origin (pull), or a directory (publish)
  std::string dir;
  std::string name;
  std::string version;
  std::string chunk_bytes = "64Mi";
  std::string checksum = "sha256";
  std::string tier_timeout = "60s";
  int parallel = 8;
  int threads = 0;
  bool json = false;
};

struct ModelCommands {
  ModelCommandOptions options;
  CLI::App* publish = nullptr;
  CLI::App* pull = nullptr;
  CLI::App* sync = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* ls = nullptr;
  CLI::App* rm = nullptr;
  CLI::App* pin = nullptr;
  CLI::App* unpin = nullptr;
};

void AddModelCommands(CLI::App& app, ModelCommands* commands);
// The exit code when a model command was parsed; nullopt otherwise. `json` is the global flag;
// `model pull|sync` without --rack-cache ask the node at `cluster` (Admin.Status, Admin.Members)
// for the storage peer of its rack.
std::optional<int> RunModelCommands(const ModelCommands& commands, bool json,
                                    const ClusterAccess& cluster);

}  // namespace exa::tools
