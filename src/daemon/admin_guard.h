// Who may change this node or the cluster (docs/security.md#admin-rpcs). Every RPC that acts —
// Admin, Node and Scheduler writes — asks one AdminGuard: the caller's bearer token is checked
// against the admin tokens in force, the decision is one JSON audit line (who: token name and
// certificate identity; the peer's address; the method; the result) and a counter, and a peer
// that keeps sending bad credentials is refused without a check for the rest of the window.
//
// Thread safety: Check and Decide may be called from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "gateway/api_keys.h"
#include "metrics/registry.h"
#include "net/admin_auth.h"

namespace exa::daemon {

struct AdminGuardOptions {
  // A peer that sends this many bad credentials within `failure_window` is refused
  // (RESOURCE_EXHAUSTED) without a check until the window ends.
  int max_failures = 10;
  absl::Duration failure_window = absl::Minutes(1);
  // Peers whose failures are remembered at once; past it the oldest window is forgotten.
  size_t max_tracked_peers = 4096;
};

class AdminGuard {
 public:
  // `tokens` null: admin RPCs are open (a loopback node without a token file, or --insecure);
  // every call is still audited.
  AdminGuard(std::unique_ptr<gateway::ApiKeys> tokens, metrics::Registry& registry,
             AdminGuardOptions options = {});

  grpc::Status Check(const grpc::ServerContextBase& context, std::string_view method);
  // Check's decision from its parts (tests).
  grpc::Status Decide(std::string_view authorization, const std::string& peer,
                      const std::string& identity, std::string_view method, absl::Time now);
  bool enforcing() const { return tokens_ != nullptr; }

 private:
  struct Failures {
    absl::Time window_start;
    int count = 0;
    absl::Time last_logged;  // throttled refusals are logged once a second, with a count
    int unlogged = 0;
  };
  // Whether `peer` is over its failures now; counts one more refusal when it is.
  bool ThrottledLocked(const std::string& peer, absl::Time now, int* unlogged)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountFailureLocked(const std::string& peer, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One audit line (at `level`) and, for an allowed call, its count.
  void Audit(LogLevel level, const std::string& method, std::string_view result,
             const std::string& who, const std::string& peer, const std::string& identity,
             std::string_view detail);

  const std::unique_ptr<gateway::ApiKeys> tokens_;
  const AdminGuardOptions options_;
  metrics::Family<metrics::Counter>& decisions_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Failures> failures_ ABSL_GUARDED_BY(mu_);
};

// The token in <data_dir>/admin.token, made (random, mode 0600) when the file does not exist:
// the credential of a node started without admin.token_file (docs/security.md#bootstrap).
absl::StatusOr<std::string> LoadOrCreateAdminToken(const std::string& data_dir);

}  // namespace exa::daemon
