#include "daemon/options.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/chars.h"
#include "common/host_port.h"
#include "common/status.h"
#include "common/strings.h"
#include "daemon/node_identity.h"
#include "daemon/observer_options.h"
#include "daemon/weights_options.h"

namespace exa::daemon {
namespace {

std::string ValidateRoles(const std::vector<std::string>& roles) {
  if (roles.empty()) return "expected at least one role";
  for (const std::string& r : roles) {
    bool known = r == "auto" || std::find(kRoles.begin(), kRoles.end(), r) != kRoles.end();
    if (!known) {
      return StrCat("\"", r,
                    "\": expected a comma list of inference, gateway, scheduler, storage, "
                    "observer, or auto");
    }
  }
  if (roles.size() > 1 && std::find(roles.begin(), roles.end(), "auto") != roles.end()) {
    return "\"auto\" cannot be combined with pinned roles";
  }
  return "";
}

std::string ValidateJoin(const std::vector<std::string>& peers) {
  for (const std::string& p : peers) {
    if (std::string error = HostPortError(p); !error.empty()) return error;
  }
  return "";
}

// The first up, non-loopback IPv4 address: what peers on the LAN can reach when we bind to any.
std::string FirstInterfaceAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "127.0.0.1";
  std::string found = "127.0.0.1";
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    if (ntohl(in->sin_addr.s_addr) >> 24 == 127) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    found = buf;
    break;
  }
  freeifaddrs(list);
  return found;
}

std::string NotEmpty(const std::string& v) { return v.empty() ? "must not be empty" : ""; }

// Racks name placement domains and storage peers; they travel in gossip and metric labels.
std::string ValidateRack(const std::string& v) {
  if (!v.empty() && v.size() <= 64 && OnlyAlnumOr(v, "-_.")) return "";
  return StrCat("\"", v.substr(0, 80), "\": expected 1-64 of [A-Za-z0-9._-]");
}

// Listeners bind an IP address (0.0.0.0 or :: for every interface), not a name.
std::string ValidateBind(const std::string& v) {
  in6_addr buf6;
  in_addr buf4;
  if (inet_pton(AF_INET, v.c_str(), &buf4) == 1 || inet_pton(AF_INET6, v.c_str(), &buf6) == 1) {
    return "";
  }
  return StrCat("\"", v, "\": expected an IPv4 or IPv6 address, e.g. 0.0.0.0 or 10.0.0.5");
}

// What peers dial: an IP address or a host name, without a port.
std::string ValidateAdvertise(const std::string& v) {
  if (v.empty() || ValidateBind(v).empty()) return "";
  const bool hostname =
      v.size() <= 253 && OnlyAlnumOr(v, "-.") && v.front() != '-' && v.front() != '.';
  return hostname ? "" : StrCat("\"", v, "\": expected an IP address or a host name (no port)");
}

// gossip.*: the membership protocol's timing, key and elections.
void RegisterGossipConfig(config::Schema& s, DaemonOptions* o) {
  s.AddEnum("gossip.profile", &o->gossip.profile, {"lan", "wan"},
            "failure-detection timing: lan (memberlist LAN defaults) or wan");
  s.Add("gossip.key_file", &o->gossip.key_file,
        "file of base64 AES-256 keys, primary first; empty: gossip is not encrypted");
  s.Add<std::string>("gossip.cluster_name", &o->gossip.cluster_name,
                     "cluster name, authenticated with every gossip packet", NotEmpty);
  s.Add<absl::Duration>("gossip.election_hold_down", &o->gossip.election_hold_down,
                        "how long a changed membership view must hold before roles move",
                        [](const absl::Duration& d) {
                          return d >= absl::ZeroDuration() ? std::string()
                                                           : std::string("must not be negative");
                        });
  s.Add<int>("gossip.nodes_per_observer", &o->gossip.nodes_per_observer,
             "elect one observer per this many live nodes, at most 2 (the same on every node)",
             [](const int& v) { return v >= 1 ? "" : StrCat(v, ": expected 1 or more"); });
}

// admin.* and security.*: who may change the node, and what the node refuses to start without.
void RegisterSecurityConfig(config::Schema& s, DaemonOptions* o) {
  s.Add("admin.token_file", &o->admin.token_file,
        "SHA-256 hashes of admin tokens for RPCs that change a node or the cluster; empty: the "
        "token in <data_dir>/admin.token, required off loopback");
  s.Add<int>("admin.max_failures_per_minute", &o->admin.max_failures_per_minute,
             "bad admin credentials a peer may send in a minute before it is refused unchecked "
             "until the minute ends; 0: never",
             [](const int& v) { return v >= 0 ? "" : StrCat(v, ": must not be negative"); });
  s.Add("security.secure", &o->security.secure,
        "refuse to start without mutual TLS, a gossip key and admin tokens (--secure)");
  s.Add("security.insecure", &o->security.insecure,
        "reachable from other hosts without a gossip key, admin RPCs open (--insecure; labs "
        "only)");
}

// metrics.listen: empty, or an IP literal and a port ("[::1]:9464").
std::string ValidateMetricsListen(const std::string& v) {
  if (v.empty()) return "";
  const size_t colon = v.rfind(':');
  std::string host = colon == std::string::npos ? v : v.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = colon == std::string::npos ? "" : v.substr(colon + 1);
  const bool port_ok = !port.empty() && port.size() <= 5 &&
                       std::all_of(port.begin(), port.end(), ::isdigit) && std::stoi(port) <= 65535;
  if (ValidateBind(host).empty() && port_ok) return "";
  return StrCat("\"", v,
                "\": expected IP:PORT, e.g. 127.0.0.1:9464 or [::1]:9464 (port 0 picks one)");
}

}  // namespace

void RegisterConfig(config::Schema& s, DaemonOptions* o) {
  s.Add<std::string>("node.id", &o->node.id,
                     "stable node id; empty: generated once, kept in data_dir/node_id",
                     [](const std::string& v) { return v.empty() ? "" : NodeIdError(v); });
  s.Add<std::string>("node.rack", &o->node.rack, "rack this node is in (placement, storage peers)",
                     ValidateRack);
  s.Add<std::vector<std::string>>(
      "node.roles", &o->node.roles,
      "roles: inference, gateway, scheduler, storage, observer, or auto", ValidateRoles);
  s.Add("node.data_dir", &o->node.data_dir,
        "state directory; empty: /var/lib/exaserve as root, else ~/.local/state/exaserve");
  s.Add("node.cache_dir", &o->node.cache_dir, "model weight cache; empty: <data_dir>/cache");
  s.Add<std::string>(
      "network.bind", &o->network.bind,
      "address every listener binds; empty: 127.0.0.1 alone, 0.0.0.0 with network.join",
      [](const std::string& v) { return v.empty() ? std::string() : ValidateBind(v); });
  s.Add<std::string>("network.advertise", &o->network.advertise,
                     "address peers use to reach this node; empty: derived from bind",
                     ValidateAdvertise);
  s.Add("network.gossip_port", &o->network.gossip_port, "membership gossip port (UDP and TCP)");
  s.Add("network.grpc_port", &o->network.grpc_port, "gRPC port (inference, admin, node APIs)");
  s.Add("network.http_port", &o->network.http_port,
        "HTTP port (OpenAI API, /metrics, /healthz, /readyz)");
  s.Add("network.https_port", &o->network.https_port,
        "HTTPS port of the OpenAI API, with http.tls_cert_file and http.tls_key_file set");
  s.Add<std::vector<std::string>>("network.join", &o->network.join,
                                  "host:port of cluster members to join through", ValidateJoin);
  RegisterGossipConfig(s, o);
  s.AddEnum("log.format", &o->log.format, {"json", "text"}, "log line format");
  s.Add<std::string>("metrics.listen", &o->metrics.listen,
                     "IP:PORT serving /metrics alone (then not on the HTTP port); empty: the HTTP "
                     "port",
                     ValidateMetricsListen);
  s.AddEnum("log.level", &o->log.level, {"trace", "debug", "info", "warn", "error", "off"},
            "lowest level logged");
  s.Add("lifecycle.drain_timeout", &o->lifecycle.drain_timeout,
        "time in-flight requests get to finish after SIGTERM");
  s.Add<int>("lifecycle.io_threads", &o->lifecycle.io_threads, "threads for sockets and timers",
             [](const int& v) { return v >= 1 && v <= 64 ? "" : StrCat(v, ": expected 1-64"); });
  RegisterSecurityConfig(s, o);
  net::RegisterConfig(s, "tls", &o->tls);
  net::RegisterConfig(s, "http", &o->http);
  s.Add("http.tls_cert_file", &o->http.tls_cert_file,
        "PEM certificate chain for HTTPS on network.https_port; with it the OpenAI API is served "
        "there only, and the HTTP port keeps /healthz, /readyz and /metrics. Empty: no HTTPS");
  s.Add("http.tls_key_file", &o->http.tls_key_file, "PEM private key of http.tls_cert_file");
  net::RegisterConfig(s, "grpc", &o->grpc);
  node::RegisterConfig(s, "inference", &o->inference);
  node::RegisterConfig(s, "health", &o->health);
  gateway::RegisterConfig(s, "gateway", &o->gateway);
  RegisterWeightsConfig(s, &o->weights);
  s.Add("scheduler.node_token_file", &o->scheduler.node_token_file,
        "file with the admin token a scheduler presents to node agents and peer schedulers");
  auto positive = [](const absl::Duration& d) {
    return d > absl::ZeroDuration() ? std::string() : std::string("must be positive");
  };
  s.Add<absl::Duration>("scheduler.reconcile_interval", &o->scheduler.reconcile_interval,
                        "how often the reconciler compares desired and actual state", positive);
  s.Add<absl::Duration>("scheduler.rpc_timeout", &o->scheduler.rpc_timeout,
                        "deadline of the scheduler's calls to node agents and peers", positive);
  s.Add<int>("scheduler.small_cluster_max_nodes", &o->scheduler.small_cluster_max_nodes,
             "role purity (no replicas on control nodes) applies above this many nodes",
             [](const int& v) { return v >= 0 ? "" : StrCat(v, ": must not be negative"); });
  s.Add<absl::Duration>("scheduler.leak_sample_interval", &o->scheduler.leak_sample_interval,
                        "how often leak detection samples each ready replica's memory", positive);
  s.Add<int>(
      "scheduler.leak_rising_samples", &o->scheduler.leak_rising_samples,
      "samples in a row that must each rise before a replica is flagged as leaking",
      [](const int& v) { return v >= 1 && v <= 100 ? "" : StrCat(v, ": must be in [1, 100]"); });
  s.Add<double>("scheduler.leak_min_growth", &o->scheduler.leak_min_growth,
                "growth over the baseline (a fraction) a leaking replica must also show",
                [](const double& v) {
                  return v > 0 && v <= 100 ? std::string() : StrCat(v, ": must be in (0, 100]");
                });
  s.Add<std::string>("scheduler.leak_action", &o->scheduler.leak_action,
                     "what a replica flagged as leaking gets: recycle (replaced, make before "
                     "break) or report (an event, a warning and a gauge only)",
                     [](const std::string& v) {
                       return v == "recycle" || v == "report"
                                  ? std::string()
                                  : StrCat("\"", v, "\": must be recycle or report");
                     });
  RegisterObserverConfig(s, &o->observer);
}

void ResolveDefaults(DaemonOptions* o) {
  if (o->node.data_dir.empty()) {
    const char* home = std::getenv("HOME");
    o->node.data_dir = geteuid() == 0 || home == nullptr ? "/var/lib/exaserve"
                                                         : StrCat(home, "/.local/state/exaserve");
  }
  if (o->node.cache_dir.empty()) o->node.cache_dir = o->node.data_dir + "/cache";
  if (o->observer.file_sd_path.empty()) {
    o->observer.file_sd_path = o->node.data_dir + "/observer/targets.json";
  }
  if (o->network.bind.empty()) o->network.bind = o->network.join.empty() ? "127.0.0.1" : "0.0.0.0";
  if (o->network.advertise.empty()) {
    bool any = o->network.bind == "0.0.0.0" || o->network.bind == "::";
    o->network.advertise = any ? FirstInterfaceAddress() : o->network.bind;
  }
  o->http.bind_address = o->network.bind;
  o->http.port = o->network.http_port;
  o->grpc.bind_address = o->network.bind;
  o->grpc.port = o->network.grpc_port;
  o->grpc.tls = o->tls;
}

bool IsLoopback(const std::string& address) {
  in_addr v4;
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return inet_pton(AF_INET6, address.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

bool AdminTokensRequired(const DaemonOptions& o) {
  return !o.admin.token_file.empty() || (!IsLoopback(o.network.bind) && !o.security.insecure);
}

absl::Status ValidateSecurity(const DaemonOptions& o) {
  if (o.tls.enabled()) EXA_RETURN_IF_ERROR(net::LoadTls(o.tls).status());
  if (net::HttpsConfigured(o.http)) EXA_RETURN_IF_ERROR(net::CheckHttpsFiles(o.http));
  if (o.security.secure && o.security.insecure) {
    return absl::InvalidArgumentError("--secure and --insecure contradict each other: pass one");
  }
  if (!o.security.secure) {
    if (IsLoopback(o.network.bind) || o.security.insecure || !o.gossip.key_file.empty()) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(StrCat(
        "network.bind ", o.network.bind,
        " is reachable from other hosts, where gossip needs a key: pass --gossip-key-file FILE "
        "(every node the same; exaserve-cli gossip keygen makes one). Admin RPCs there need an "
        "admin token (--admin-token-file, or the one this node keeps in ",
        o.node.data_dir,
        "/admin.token). Or bind loopback only (--bind 127.0.0.1), or pass "
        "--insecure on a lab network"));
  }
  std::vector<std::string> missing;
  if (!o.tls.enabled()) {
    missing.push_back(
        "TLS certificates (--tls-ca, --tls-cert, --tls-key; exaserve-cli certs init)");
  }
  if (o.gossip.key_file.empty()) missing.push_back("a gossip key (--gossip-key-file)");
  if (o.admin.token_file.empty()) missing.push_back("admin tokens (--admin-token-file)");
  const std::vector<std::string> roles = ResolveRoles(o);
  // An auto node that joins a cluster may be elected a scheduler at run time.
  const bool electable =
      o.node.roles == std::vector<std::string>{"auto"} && !o.network.join.empty();
  if ((HasRole(roles, "scheduler") || electable) && o.scheduler.node_token_file.empty()) {
    missing.push_back("the scheduler's node token (--node-token-file)");
  }
  if (HasRole(roles, "gateway") && o.gateway.api_keys_file.empty()) {
    missing.push_back("API keys for the public API (--api-keys-file)");
  }
  if (missing.empty()) return absl::OkStatus();
  std::string list;
  for (const std::string& m : missing) StrAppend(&list, list.empty() ? "" : "; ", m);
  return absl::InvalidArgumentError(StrCat("--secure: missing ", list));
}

membership::Config GossipCoreConfig(const DaemonOptions& o) {
  return o.gossip.profile == "wan" ? membership::Config::Wan() : membership::Config::Lan();
}

std::vector<std::string> ResolveRoles(const DaemonOptions& o) {
  if (o.node.roles != std::vector<std::string>{"auto"}) return o.node.roles;
  if (o.network.join.empty()) return kRoles;
  // A joining auto node hosts replicas and can serve as a gateway; election decides whether it
  // does (Daemon::GatewayActive).
  return {"inference", "gateway"};
}

}  // namespace exa::daemon
