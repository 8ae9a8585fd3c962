// exaserve-bench soak: a local cluster (scripts/local-cluster.sh: origin +
// gateway + observer, a scheduler, CPU inference nodes, the bundled model on every inference
// node) under steady mixed traffic through the gateway while inference nodes are paused
// (SIGSTOP, then SIGCONT) and killed (-9) at random. Every request must end: with the right sum,
// or with an explicit error (an HTTP status with a JSON error body). A request with no answer by
// its deadline is a hang. Prints JSON: requests by outcome, hangs (must be 0), latency
// percentiles, each node's resident memory at the start and the end of the run, the faults
// injected and the alerts the observer raised.
//
// Thread safety: RunSoak is called once from main.
#pragma once

#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"

namespace exa::tools {

struct SoakOptions {
  double minutes = 10;
  int nodes = 6;              // scripts/local-cluster.sh up N: N − 2 inference nodes
  int concurrency = 6;        // requests in flight at once (≈ 70 % of the cluster's CPU capacity)
  double fault_every_s = 30;  // a pause or a kill this often
  double pause_s = 15;
  int max_kills = 2;  // keeps enough inference nodes for every replica
  double request_timeout_s = 60;
  uint64_t seed = 1;
  std::string script = "scripts/local-cluster.sh";
  std::string bin_dir;   // exaserved and exaserve-cli; default: next to exaserve-bench
  std::string work_dir;  // CLUSTER_DIR; default: a new /tmp directory
  int base_port = 27000;
};

// 0 on a run that ended (the JSON says whether it met its bar), 1 when the cluster did not start.
int RunSoak(const SoakOptions& options, nlohmann::json* out);

}  // namespace exa::tools
