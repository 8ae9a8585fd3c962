// exaserve-sim gossip: N copies of the real SWIM core (membership/swim_core.h) on virtual time
// over a simulated network with loss, latency + jitter, killed and paused nodes, a partition
// into halves, and racks (docs/architecture.md#module-map rule 1, docs/testing.md). Deterministic
// for a given seed.
//
// Timeline: nodes start one after another and join through seeds; once every node sees every
// other alive (warm-up), the measurement window of `duration_s` begins, and the faults happen at
// its start. The result is one JSON object:
//   suspect_first_s, dead_confirmed_s, dead_everywhere_s  {p50, p99, n} over killed nodes
//   false_deaths            healthy reachable nodes ever declared dead by anyone
//   dissemination_s         {p50, p99, n, incomplete}: a metadata update reaching every live node
//   msgs_per_node_per_s, bytes_per_node_per_s   sent by live nodes during the window
//   reconverge_after_heal_s after a partition heals, until every node sees every node alive
//   pause                   suspected / declared dead / back alive for paused nodes
//   election_agreement      fraction of live nodes whose role map equals the most common one
//
// Thread safety: RunGossipSim is a pure function of its options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exa::sim {

struct GossipSimOptions {
  int nodes = 64;
  uint64_t seed = 1;
  double duration_s = 60;   // measurement window after warm-up
  double loss = 0;          // datagram loss probability, 0..1
  double latency_ms = 0.5;  // one-way
  double jitter_ms = 0.5;   // uniform extra delay
  int kill = 0;
  int pause_nodes = 0;
  double pause_s = 0;
  double partition_s = 0;  // halves
  int racks = 1;
  std::string profile = "lan";   // lan | wan
  double update_interval_s = 5;  // one metadata update somewhere this often; 0: none
  double join_spacing_ms = 20;   // between node starts during warm-up
  double max_warmup_s = 300;
};

// Parses `--key value` pairs as exaserve-sim gossip takes them (without the subcommand):
// --nodes --seed --duration --loss (0.1 or 10%) --latency --jitter --kill
// --pause K:SECONDS --partition halves:SECONDS --racks --profile --update-interval.
absl::StatusOr<GossipSimOptions> ParseGossipSimArgs(const std::vector<std::string>& args);

nlohmann::json RunGossipSim(const GossipSimOptions& options);

// main() of `exaserve-sim`: `exaserve-sim gossip [flags]` prints the JSON on stdout.
int GossipSimMain(int argc, char** argv);

}  // namespace exa::sim
