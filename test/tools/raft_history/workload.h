// The drivers of exa-raft-history (docs/testing.md#control-plane): concurrent clients that put,
// delete and read a few keys through every scheduler and record each operation, the final reads
// after the faults heal, and the latency and fail-over bench.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace exa::raft_history {

struct RunOptions {
  std::vector<std::string> addresses;  // the schedulers' gRPC host:port
  std::vector<std::string> keys;       // spec names
  std::string history;                 // JSONL file, appended to
  int clients = 5;
  absl::Duration duration = absl::Seconds(60);
  absl::Duration deadline = absl::Milliseconds(2500);  // per call
  absl::Duration pause = absl::Milliseconds(20);       // mean gap between a client's calls
  double read_fraction = 0.5;
  double delete_fraction = 0.15;  // the rest are puts
  uint64_t seed = 1;
};

// Runs the clients for the duration; the JSON counts what they did, per outcome and per node.
absl::StatusOr<nlohmann::json> RunClients(const RunOptions& options);

struct FinalOptions {
  std::vector<std::string> addresses;
  std::vector<std::string> keys;
  std::string history;
  absl::Duration deadline = absl::Seconds(5);
  absl::Duration retry_for = absl::Seconds(60);  // per (node, key) until one read answers
};

// Reads every key through every scheduler, recorded as final reads; an error names the
// (node, key) pairs that never answered.
absl::StatusOr<nlohmann::json> FinalReads(const FinalOptions& options);

struct BenchNode {
  std::string id;       // its --node-id, as Describe names the leader
  std::string address;  // gRPC host:port
  int pid = 0;          // for the fail-over bench: the process to kill -9
};

struct BenchOptions {
  std::vector<BenchNode> nodes;
  int applies = 300;  // per path (leader, follower)
  absl::Duration deadline = absl::Seconds(5);
  absl::Duration settle = absl::Seconds(60);  // for a leader every node agrees on
};

// Sequential applies through the leader, then through a follower: latency percentiles.
absl::StatusOr<nlohmann::json> BenchLatency(const BenchOptions& options);
// Kills the leader (SIGKILL) and times the first write acknowledged through a survivor.
absl::StatusOr<nlohmann::json> BenchFailover(const BenchOptions& options);

}  // namespace exa::raft_history
