// The daemon's whole configuration: one options struct per module, registered in one schema so
// `exaserved --print-config` shows everything that can be set (config/exaserved.yaml documents
// it). Defaults here are the documented defaults.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "config/schema.h"
#include "daemon/observer_options.h"
#include "daemon/weights_options.h"
#include "gateway/frontend.h"
#include "membership/config.h"
#include "net/grpc_server.h"
#include "net/http_server.h"
#include "net/tls.h"
#include "node/replica_health.h"
#include "node/replica_host.h"

namespace exa::daemon {

// Every role a node can run (docs/architecture.md#roles), in the order they are shown.
inline const std::vector<std::string> kRoles = {"scheduler", "gateway", "storage", "inference",
                                                "observer"};

struct NodeOptions {
  std::string id;  // empty: generated once and kept in data_dir/node_id
  std::string rack = "default";
  std::vector<std::string> roles{"auto"};
  std::string data_dir;   // empty: /var/lib/exaserve as root, else ~/.local/state/exaserve
  std::string cache_dir;  // empty: <data_dir>/cache
};

struct NetworkOptions {
  // Empty: 127.0.0.1 alone (nothing to join), 0.0.0.0 with network.join
  // (docs/security.md#defaults).
  std::string bind;
  std::string advertise;  // empty: the bind address, or the first non-loopback IPv4 address
  uint16_t gossip_port = 7946;
  uint16_t grpc_port = 7070;
  uint16_t http_port = 8080;
  // With http.tls_cert_file and http.tls_key_file: the HTTPS port of the OpenAI API.
  uint16_t https_port = 8443;
  std::vector<std::string> join;  // host:port of any members to join through
};

struct GossipOptions {
  std::string profile = "lan";  // lan: memberlist LAN defaults; wan: memberlist WAN defaults
  std::string key_file;         // base64 keys, primary first; empty: plain text (warned)
  std::string cluster_name = "exaserve";  // authenticated with every sealed packet
  // Role election: a changed view must hold this long before roles move (no flapping).
  absl::Duration election_hold_down = absl::Seconds(30);
  // One observer is elected per this many live nodes (at most 2). Every node must use the same
  // value: each computes the election itself.
  int nodes_per_observer = 64;
};

struct MetricsOptions {
  // Empty: /metrics on the HTTP port (and the HTTPS one). IP:PORT: there only, e.g.
  // 127.0.0.1:9464 for a local agent; the cluster's observer then cannot scrape this node.
  std::string listen;
};

struct LogOptions {
  std::string format = "json";
  std::string level = "info";
};

struct SecurityOptions {
  // --secure: refuse to start unless every channel is authenticated (mutual TLS, gossip key,
  // admin tokens; API keys where the node can be a gateway). See ValidateSecure.
  bool secure = false;
  // --insecure: a node reachable from other hosts may run without a gossip key and with open
  // admin RPCs (a lab network); logged as a warning at start. See ValidateSecurity.
  bool insecure = false;
};

struct AdminOptions {
  // SHA-256 hashes of admin tokens (the API key file format); empty: the token the node keeps in
  // <data_dir>/admin.token, required off loopback (AdminTokensRequired).
  std::string token_file;
  // A peer that sends this many bad admin credentials in a minute is refused without a check
  // until the minute ends (daemon/admin_guard.h); 0: never.
  int max_failures_per_minute = 10;
};

struct LifecycleOptions {
  // In-flight requests get this long to finish after SIGTERM before they are cut off.
  absl::Duration drain_timeout = absl::Seconds(30);
  int io_threads = 2;  // sockets and timers only; engines run on their own threads
};

// The scheduler role's service (scheduler/scheduler_service.h).
struct SchedulerOptions {
  // A file holding the admin token this node presents to node agents and peer schedulers (the
  // token itself, not its hash); empty: none (their admin RPCs must be open).
  std::string node_token_file;
  absl::Duration reconcile_interval = absl::Seconds(1);
  absl::Duration rpc_timeout = absl::Seconds(2);
  // Role purity (no replicas on control nodes) applies above this many nodes.
  int small_cluster_max_nodes = 4;
  // Leak detection (scheduler/leak_detector.h): sampling interval, rising samples in a row,
  // growth over the baseline.
  absl::Duration leak_sample_interval = absl::Hours(1);
  int leak_rising_samples = 4;
  double leak_min_growth = 0.10;
  // What a flagged replica gets: "recycle" (replaced, make before break) or "report" (only
  // the event, the warning and the gauge).
  std::string leak_action = "recycle";
};

struct DaemonOptions {
  NodeOptions node;
  NetworkOptions network;
  GossipOptions gossip;
  LogOptions log;
  MetricsOptions metrics;
  LifecycleOptions lifecycle;
  AdminOptions admin;
  SecurityOptions security;
  net::TlsOptions tls;  // copied into grpc.tls and used for every outgoing channel
  net::HttpServerOptions http;
  net::GrpcServerOptions grpc;
  node::InferenceOptions inference;
  node::HealthOptions health;
  gateway::GatewayOptions gateway;
  WeightsOptions weights;
  SchedulerOptions scheduler;
  ObserverOptions observer;
};

inline bool HasRole(const std::vector<std::string>& roles, std::string_view role) {
  return std::find(roles.begin(), roles.end(), role) != roles.end();
}

void RegisterConfig(config::Schema& schema, DaemonOptions* options);

// Fills derived defaults (data and cache dirs, advertise address) and copies the network
// section into the servers' options.
void ResolveDefaults(DaemonOptions* options);

// With security.secure, every missing piece at once (TLS files, gossip key, admin tokens, the
// scheduler's node token, gateway API keys), each named with its flag; OK otherwise. TLS files
// are also checked to parse and match whenever they are set. A node bound to an address other
// hosts can reach needs a gossip key unless security.insecure (docs/security.md#defaults).
// Call after ResolveDefaults.
absl::Status ValidateSecurity(const DaemonOptions& options);

// Whether `address` (an IP literal) is reachable from this host only: 127.0.0.0/8 or ::1.
bool IsLoopback(const std::string& address);

// Whether admin RPCs need a token on this node: a token file is configured, or the node is
// reachable from other hosts without security.insecure (docs/security.md#admin-rpcs).
bool AdminTokensRequired(const DaemonOptions& options);

// The SWIM core's tunables for the configured profile.
membership::Config GossipCoreConfig(const DaemonOptions& options);

// The roles this node runs: pinned roles as given; `auto` alone with nothing to join takes every
// role (the single-machine default). With peers, `auto` is decided by the cluster's role
// election (membership issue); until it exists such a node serves as inference only.
std::vector<std::string> ResolveRoles(const DaemonOptions& options);

}  // namespace exa::daemon
