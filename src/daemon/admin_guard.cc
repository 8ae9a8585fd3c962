#include "daemon/admin_guard.h"

#include <algorithm>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::daemon {
namespace {

// Internal replication between schedulers runs many times a second: audited at debug level when
// allowed, so the log shows what people did.
bool Routine(std::string_view method) { return method == "Scheduler.Replicate"; }

}  // namespace

AdminGuard::AdminGuard(std::unique_ptr<gateway::ApiKeys> tokens, metrics::Registry& registry,
                       AdminGuardOptions options)
    : tokens_(std::move(tokens)),
      options_(options),
      decisions_(registry.AddCounter(
          "exaserve_admin_requests_total",
          "RPCs that change the node or the cluster, by method and result: allowed, refused (a "
          "missing or wrong admin token) or throttled (the peer sent too many bad ones).",
          {"method", "result"})) {}

grpc::Status AdminGuard::Check(const grpc::ServerContextBase& context, std::string_view method) {
  return Decide(net::AuthorizationOf(context), net::PeerAddressOf(context),
                net::PeerIdentityOf(context), method, absl::Now());
}

grpc::Status AdminGuard::Decide(std::string_view authorization, const std::string& peer,
                                const std::string& identity, std::string_view method,
                                absl::Time now) {
  const std::string m(method);
  if (!tokens_) {
    Audit(Routine(method) ? LogLevel::kDebug : LogLevel::kInfo, m, "allowed",
          "anonymous (admin RPCs are open)", peer, identity, "");
    return grpc::Status::OK;
  }
  int unlogged = 0;
  bool throttled = false;
  {
    absl::MutexLock lock(&mu_);
    throttled = ThrottledLocked(peer, now, &unlogged);
  }
  if (throttled) {
    decisions_.WithLabels({m, "throttled"}).Increment();
    if (unlogged > 0) {
      Audit(LogLevel::kWarn, m, "throttled", "", peer, identity,
            StrCat(unlogged, " refused since the last line"));
    }
    return grpc::Status(grpc::RESOURCE_EXHAUSTED,
                        StrCat("too many bad admin credentials from ", peer, "; retry in ",
                               absl::FormatDuration(options_.failure_window)));
  }
  absl::StatusOr<std::string> who = tokens_->Check(authorization);
  if (!who.ok()) {
    {
      absl::MutexLock lock(&mu_);
      CountFailureLocked(peer, now);
    }
    decisions_.WithLabels({m, "refused"}).Increment();
    Audit(LogLevel::kWarn, m, "refused", "", peer, identity, std::string(who.status().message()));
    return grpc::Status(grpc::UNAUTHENTICATED, std::string(who.status().message()));
  }
  Audit(Routine(method) ? LogLevel::kDebug : LogLevel::kInfo, m, "allowed", *who, peer, identity,
        "");
  return grpc::Status::OK;
}

void AdminGuard::Audit(LogLevel level, const std::string& method, std::string_view result,
                       const std::string& who, const std::string& peer, const std::string& identity,
                       std::string_view detail) {
  if (result == "allowed") decisions_.WithLabels({method, "allowed"}).Increment();
  if (!LogEnabled(level)) return;
  Log(level, "audit", "admin rpc",
      {{"method", method},
       {"result", result},
       {"who", who},
       {"peer", peer},
       {"certificate", identity},
       {"detail", detail}});
}

bool AdminGuard::ThrottledLocked(const std::string& peer, absl::Time now, int* unlogged) {
  auto it = failures_.find(peer);
  if (it == failures_.end()) return false;
  Failures& f = it->second;
  if (now - f.window_start >= options_.failure_window) {
    failures_.erase(it);
    return false;
  }
  if (f.count < options_.max_failures) return false;
  ++f.unlogged;
  if (now - f.last_logged >= absl::Seconds(1)) {
    *unlogged = f.unlogged;
    f.unlogged = 0;
    f.last_logged = now;
  }
  return true;
}

void AdminGuard::CountFailureLocked(const std::string& peer, absl::Time now) {
  auto it = failures_.find(peer);
  if (it == failures_.end()) {
    if (failures_.size() >= options_.max_tracked_peers) {
      auto oldest = std::min_element(failures_.begin(), failures_.end(), [](auto& a, auto& b) {
        return a.second.window_start < b.second.window_start;
      });
      failures_.erase(oldest);
    }
    it = failures_.emplace(peer, Failures{.window_start = now}).first;
  }
  ++it->second.count;
}

absl::StatusOr<std::string> LoadOrCreateAdminToken(const std::string& data_dir) {
  const std::string path = data_dir + "/admin.token";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    EXA_ASSIGN_OR_RETURN(std::string text, ReadFile(path, 4096));
    std::string token(StripWhitespace(text));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          StrCat(path, ": empty; delete it and restart to make a new admin token"));
    }
    return token;
  }
  std::string token = gateway::ApiKeys::NewKey();
  EXA_RETURN_IF_ERROR(WriteFileAtomically(path, token + "\n", 0600));
  EXA_LOG_INFO("daemon", "made an admin token (exaserve-cli on this host finds it)",
               {{"path", path}});
  return token;
}

}  // namespace exa::daemon
