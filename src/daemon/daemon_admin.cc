// The daemon's admin surface: the Admin service and the guard every service that changes the
// node or the cluster asks (docs/security.md#admin-rpcs).
#include <climits>

#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "daemon/admin_service.h"
#include "daemon/daemon.h"

namespace exa::daemon {
namespace {

// The state as Admin.Status reports it. A stopped daemon answers no calls, so kStopped is never
// asked for; it reads "starting", as it always has.
std::string StateName(Daemon::State state) {
  return state == Daemon::State::kReady      ? "ready"
         : state == Daemon::State::kDraining ? "draining"
                                             : "starting";
}

}  // namespace

// The Admin service over the parts the daemon owns (daemon/admin_service.h).
absl::Status Daemon::MakeAdminService() {
  EXA_RETURN_IF_ERROR(MakeAdminGuard());
  admin_ = std::make_unique<AdminService>(AdminParts{
      .options = options_,
      .node_id = node_id_,
      .start_time = start_time_,
      .version = Version(),
      .grpc = grpc_,
      .http = http_,
      .gossip = gossip_,
      .replicas = replicas_,
      .routes = routes_,
      .observer = observer_,
      .burn_in_mu = burn_in_mu_,
      .gpus = gpus_,
      .state = [this] { return StateName(state_); },
      .roles = [this] { return CurrentRoles(); },
      .elected_roles = [this](const std::string& id) { return ElectedRoles(id); },
      .route_scheduler = [this] { return RouteScheduler(); },
      .authorize = [this](const grpc::ServerContextBase& c,
                          std::string_view m) { return AuthorizeAdmin(c, m); },
  });
  return absl::OkStatus();
}

absl::Status Daemon::MakeAdminGuard() {
  std::unique_ptr<gateway::ApiKeys> tokens;
  if (!options_.admin.token_file.empty()) {
    EXA_ASSIGN_OR_RETURN(tokens, gateway::ApiKeys::Load(options_.admin.token_file, "admin token"));
  } else {
    EXA_ASSIGN_OR_RETURN(own_admin_token_, LoadOrCreateAdminToken(options_.node.data_dir));
    if (AdminTokensRequired(options_)) {
      tokens = gateway::ApiKeys::FromToken("local", own_admin_token_, "admin token");
    }
  }
  const int max_failures = options_.admin.max_failures_per_minute;
  admin_guard_ = std::make_unique<AdminGuard>(
      std::move(tokens), registry_,
      AdminGuardOptions{.max_failures = max_failures > 0 ? max_failures : INT_MAX});
  const std::string& bind = options_.network.bind;
  if (IsLoopback(bind)) {
    EXA_LOG_INFO("daemon",
                 "listening on loopback only; to serve other hosts set --bind ADDR (config "
                 "network.bind) with --gossip-key-file (docs/security.md)",
                 {{"bind", bind}});
  } else if (options_.security.insecure) {
    EXA_LOG_WARN("daemon",
                 "--insecure: reachable from other hosts, with admin RPCs open unless a token "
                 "file is set and gossip in plain text unless a key is set; for a lab network "
                 "only (docs/security.md)",
                 {{"bind", bind},
                  {"admin_tokens", admin_guard_->enforcing() ? "required" : "open"},
                  {"gossip_key", options_.gossip.key_file.empty() ? "none" : "set"}});
  }
  return absl::OkStatus();
}

grpc::Status Daemon::AuthorizeAdmin(const grpc::ServerContextBase& context,
                                    std::string_view method) const {
  return admin_guard_->Check(context, method);
}

}  // namespace exa::daemon
