// What every exaserve-cli subcommand shares: the node its global flags point at, how it reports
// a usage error or a failed call (exit code 2 and 1, the contract in exaserve_cli.cc's header),
// and the gRPC context it calls a node with. One home, so every command prints its errors alike.
//
// Thread-safety: the functions keep no state; each error is one fprintf of a whole line, so
// FanOut's worker threads may report at once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"

namespace exa::tools {

// The node the CLI's global flags point at (--addr, --token, --timeout).
struct ClusterAccess {
  std::string addr;   // --addr, host:port of any node's gRPC
  std::string token;  // admin token, sent as "authorization: Bearer ..." when set
  absl::Duration timeout = absl::Seconds(5);
};

// The exit code of a usage error: bad flags, or input the node refused as INVALID_ARGUMENT.
inline constexpr int kUsageExitCode = 2;
// The exit code of a failure: the node could not be reached or answered with an error.
inline constexpr int kFailureExitCode = 1;

// Prints "exaserve-cli: <message>" ("exaserve-cli <command>: <message>" when `command` is given,
// e.g. "model") to stderr; returns kUsageExitCode.
int Usage(std::string_view message, std::string_view command = {});

// As Usage, for an operation that failed (a tier unreachable, bad chunks found); returns
// kFailureExitCode.
int Failure(std::string_view message, std::string_view command = {});

// Prints "exaserve-cli: <addr>: <message> (<numeric code>)" to stderr, `message` defaulting to
// the status's own; returns kFailureExitCode.
int RpcFailure(std::string_view addr, const grpc::Status& status);
int RpcFailure(std::string_view addr, const grpc::Status& status, std::string_view message);

// The admin token a node on this host keeps in its data dir (docs/security.md#bootstrap), for
// calls to `addr` when it is an address of this host (loopback or a local interface); "" when
// `addr` is another host's, or no readable token is found. Looks in `data_dir` when given, else
// $EXASERVE_NODE_DATA_DIR, /var/lib/exaserve and ~/.local/state/exaserve, in that order.
std::string LocalAdminToken(std::string_view addr, const std::string& data_dir);

// A model as a user types it: NAME, NAME@VERSION (what the CLI and the API print) or NAME:VERSION
// (accepted too, docs/reference/cli.md#model-names). Moves the version, when there is one, from
// `*model` to `*version`; returns "" when fine, else the error naming `flag` and the value (a
// version that disagrees with one already in `*version` included).
std::string SplitModelVersion(std::string_view flag, std::string* model, std::string* version);

// Parses "KEY=VALUE" pairs given with `flag` into `out`; false (with a usage message printed)
// on a malformed one.
bool ParsePairs(const std::string& flag, const std::vector<std::string>& pairs,
                std::map<std::string, std::string>* out);

// A context for one call to `cluster`: a deadline `timeout` from now (default cluster.timeout)
// and its token, when set, as a bearer credential.
std::unique_ptr<grpc::ClientContext> MakeContext(const ClusterAccess& cluster);
std::unique_ptr<grpc::ClientContext> MakeContext(const ClusterAccess& cluster,
                                                 absl::Duration timeout);

}  // namespace exa::tools
