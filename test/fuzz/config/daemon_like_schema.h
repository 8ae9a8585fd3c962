// A config schema shaped like exaserved's (daemon/options.cc): the same sections and key names,
// a key of every type Schema supports, validators and enums. The config fuzz target loads its
// input into this instead of the daemon's own schema so that it links exa::config alone (the
// daemon's registration pulls in every module, gRPC included); the parsing path is the same.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/strings.h"
#include "config/schema.h"

namespace exa::config::fuzz {

struct DaemonLikeOptions {
  std::string node_id;
  std::string node_rack = "default";
  std::vector<std::string> node_roles{"auto"};
  std::string network_bind = "0.0.0.0";
  uint16_t gossip_port = 7946;
  uint16_t http_port = 8080;
  std::vector<std::string> join;
  std::string gossip_profile = "lan";
  absl::Duration election_hold_down = absl::Seconds(30);
  std::string log_level = "info";
  int io_threads = 2;
  absl::Duration drain_timeout = absl::Seconds(30);
  Bytes max_body_bytes{1 << 20};
  Bytes max_header_bytes{16 << 10};
  absl::Duration read_timeout = absl::Seconds(30);
  uint32_t max_concurrent_streams = 1024;
  bool burn_in = true;
  double gpu_memory_utilization = 0.9;
  int64_t sim_seed = 0;
  std::vector<std::string> models;

  // Equal values; NaN equals NaN (a config may set one; the fuzz target compares round trips).
  bool SameAs(DaemonLikeOptions other) const {
    DaemonLikeOptions self = *this;
    if (std::isnan(self.gpu_memory_utilization) && std::isnan(other.gpu_memory_utilization)) {
      self.gpu_memory_utilization = other.gpu_memory_utilization = 0;
    }
    return self == other;
  }
  friend bool operator==(const DaemonLikeOptions&, const DaemonLikeOptions&) = default;
};

inline std::string NotEmpty(const std::string& v) { return v.empty() ? "must not be empty" : ""; }

inline void RegisterDaemonLike(Schema& s, DaemonLikeOptions* o) {
  s.Add("node.id", &o->node_id, "stable node id");
  s.Add<std::string>("node.rack", &o->node_rack, "rack", NotEmpty);
  s.Add<std::vector<std::string>>(
      "node.roles", &o->node_roles, "roles", [](const std::vector<std::string>& roles) {
        return roles.empty() ? std::string("expected at least one role") : std::string();
      });
  s.Add<std::string>("network.bind", &o->network_bind, "bind address", NotEmpty);
  s.Add("network.gossip_port", &o->gossip_port, "gossip port");
  s.Add("network.http_port", &o->http_port, "HTTP port");
  s.Add("network.join", &o->join, "peers to join through");
  s.AddEnum("gossip.profile", &o->gossip_profile, {"lan", "wan"}, "failure-detection timing");
  s.Add<absl::Duration>("gossip.election_hold_down", &o->election_hold_down, "hold-down",
                        [](const absl::Duration& d) {
                          return d >= absl::ZeroDuration() ? std::string()
                                                           : std::string("must not be negative");
                        });
  s.AddEnum("log.level", &o->log_level, {"trace", "debug", "info", "warn", "error", "off"},
            "lowest level logged");
  s.Add<int>("lifecycle.io_threads", &o->io_threads, "io threads",
             [](const int& v) { return v >= 1 && v <= 64 ? "" : StrCat(v, ": expected 1-64"); });
  s.Add("lifecycle.drain_timeout", &o->drain_timeout, "drain timeout");
  s.Add("http.max_body_bytes", &o->max_body_bytes, "largest body");
  s.Add("http.max_header_bytes", &o->max_header_bytes, "largest head");
  s.Add("http.read_timeout", &o->read_timeout, "read timeout");
  s.Add("grpc.max_concurrent_streams", &o->max_concurrent_streams, "streams per connection");
  s.Add("inference.burn_in", &o->burn_in, "burn-in at start");
  s.Add("inference.gpu_memory_utilization", &o->gpu_memory_utilization, "GPU memory share");
  s.Add("inference.sim_seed", &o->sim_seed, "sim seed");
  s.Add("inference.models", &o->models, "model directories");
}

}  // namespace exa::config::fuzz
