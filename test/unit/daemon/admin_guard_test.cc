// Who may change a node (docs/security.md#admin-rpcs): the exposure rules a node starts under,
// the token it makes for itself, and the guard's decisions, counters and per-peer brake.
#include "daemon/admin_guard.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "daemon/options.h"
#include "support/temp_dir.h"

namespace exa::daemon {
namespace {

DaemonOptions Resolved(std::vector<std::string> join, std::string bind = "") {
  DaemonOptions o;
  o.node.data_dir = "/tmp/exa-node";
  o.network.join = std::move(join);
  o.network.bind = std::move(bind);
  ResolveDefaults(&o);
  return o;
}

double Count(metrics::Registry& registry, const std::string& method, const std::string& result) {
  const std::string text = registry.Expose();
  const std::string series =
      "exaserve_admin_requests_total{method=\"" + method + "\",result=\"" + result + "\"} ";
  size_t at = text.find(series);
  return at == std::string::npos ? 0 : std::stod(text.substr(at + series.size()));
}

TEST_CASE("A node alone listens on loopback; one that joins on every address", "[daemon]") {
  CHECK(Resolved({}).network.bind == "127.0.0.1");
  CHECK(Resolved({"10.0.0.1:7946"}).network.bind == "0.0.0.0");
  CHECK(Resolved({}, "10.0.0.5").network.bind == "10.0.0.5");  // explicit wins
  CHECK(IsLoopback("127.0.0.1"));
  CHECK(IsLoopback("127.3.4.5"));
  CHECK(IsLoopback("::1"));
  CHECK_FALSE(IsLoopback("0.0.0.0"));
  CHECK_FALSE(IsLoopback("::"));
  CHECK_FALSE(IsLoopback("10.0.0.5"));
}

TEST_CASE("Off loopback a node needs a gossip key or --insecure, and admin tokens", "[daemon]") {
  DaemonOptions local = Resolved({});
  CHECK(ValidateSecurity(local).ok());
  CHECK_FALSE(AdminTokensRequired(local));

  DaemonOptions exposed = Resolved({}, "10.0.0.5");
  absl::Status s = ValidateSecurity(exposed);
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  const std::string message(s.message());
  for (const char* flag : {"--gossip-key-file", "--admin-token-file", "--insecure", "--bind"}) {
    CHECK(message.find(flag) != std::string::npos);
  }
  CHECK(AdminTokensRequired(exposed));

  exposed.gossip.key_file = "/etc/exaserve/gossip.key";
  CHECK(ValidateSecurity(exposed).ok());
  CHECK(AdminTokensRequired(exposed));

  DaemonOptions lab = Resolved({"10.0.0.1:7946"});
  lab.security.insecure = true;
  CHECK(ValidateSecurity(lab).ok());
  CHECK_FALSE(AdminTokensRequired(lab));
  lab.admin.token_file = "/etc/exaserve/admin-tokens";  // a token file is always enforced
  CHECK(AdminTokensRequired(lab));

  lab.security.secure = true;
  CHECK(ValidateSecurity(lab).message() ==
        "--secure and --insecure contradict each other: pass one");
}

TEST_CASE("The node's own admin token is made once, private, and kept", "[daemon]") {
  testing::TempDir tmp;
  const std::string dir = tmp.path.string();
  absl::StatusOr<std::string> first = LoadOrCreateAdminToken(dir);
  REQUIRE(first.ok());
  CHECK(first->rfind("exa-", 0) == 0);
  struct stat st {};
  REQUIRE(stat((dir + "/admin.token").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  absl::StatusOr<std::string> again = LoadOrCreateAdminToken(dir);
  REQUIRE(again.ok());
  CHECK(*again == *first);
}

TEST_CASE("The guard allows the token, refuses others, counts both, brakes a guesser", "[daemon]") {
  metrics::Registry registry;
  AdminGuard guard(gateway::ApiKeys::FromToken("local", "exa-secret", "admin token"), registry,
                   {.max_failures = 3, .failure_window = absl::Minutes(1)});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  CHECK(guard.Decide("Bearer exa-secret", "10.0.0.7", "", "Node.StopReplica", t0).ok());
  grpc::Status missing = guard.Decide("", "10.0.0.7", "", "Node.StopReplica", t0);
  CHECK(missing.error_code() == grpc::UNAUTHENTICATED);
  CHECK(missing.error_message().find("missing Authorization header") != std::string::npos);
  CHECK(guard.Decide("Bearer wrong", "10.0.0.7", "", "Node.StopReplica", t0).error_code() ==
        grpc::UNAUTHENTICATED);
  CHECK(guard.Decide("Bearer wrong", "10.0.0.7", "", "Node.StopReplica", t0).error_code() ==
        grpc::UNAUTHENTICATED);
  // Three failures: the peer is braked, even with the right token, until the window ends.
  grpc::Status braked = guard.Decide("Bearer exa-secret", "10.0.0.7", "", "Node.StopReplica", t0);
  CHECK(braked.error_code() == grpc::RESOURCE_EXHAUSTED);
  CHECK(braked.error_message().find("10.0.0.7") != std::string::npos);
  // Another peer is not.
  CHECK(guard.Decide("Bearer exa-secret", "10.0.0.8", "", "Node.StopReplica", t0).ok());
  CHECK(guard.Decide("Bearer exa-secret", "10.0.0.7", "", "Node.StopReplica", t0 + absl::Minutes(1))
            .ok());
  CHECK(Count(registry, "Node.StopReplica", "allowed") == 3);
  CHECK(Count(registry, "Node.StopReplica", "refused") == 3);
  CHECK(Count(registry, "Node.StopReplica", "throttled") == 1);
}

TEST_CASE("An open guard allows every call and still counts it", "[daemon]") {
  metrics::Registry registry;
  AdminGuard guard(nullptr, registry);
  CHECK_FALSE(guard.enforcing());
  CHECK(guard.Decide("", "127.0.0.1", "", "Admin.GossipKey", absl::Now()).ok());
  CHECK(Count(registry, "Admin.GossipKey", "allowed") == 1);
}

TEST_CASE("Remembered peers are bounded: the oldest window is forgotten", "[daemon]") {
  metrics::Registry registry;
  AdminGuard guard(gateway::ApiKeys::FromToken("local", "exa-secret", "admin token"), registry,
                   {.max_failures = 1, .max_tracked_peers = 2});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  (void)guard.Decide("", "10.0.0.1", "", "Admin.GossipKey", t0);
  (void)guard.Decide("", "10.0.0.2", "", "Admin.GossipKey", t0 + absl::Seconds(1));
  (void)guard.Decide("", "10.0.0.3", "", "Admin.GossipKey", t0 + absl::Seconds(2));
  // 10.0.0.1 was forgotten to make room: it may try again; 10.0.0.3 is braked.
  CHECK(guard.Decide("Bearer exa-secret", "10.0.0.1", "", "Admin.GossipKey", t0 + absl::Seconds(3))
            .ok());
  CHECK(guard.Decide("Bearer exa-secret", "10.0.0.3", "", "Admin.GossipKey", t0 + absl::Seconds(3))
            .error_code() == grpc::RESOURCE_EXHAUSTED);
}

}  // namespace
}  // namespace exa::daemon
