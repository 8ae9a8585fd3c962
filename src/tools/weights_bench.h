// `exaserve-bench weights`: weight distribution measured against baselines taken in the same run
// (docs/testing.md). Everything runs in this one process: an origin and a rack cache peer as two
// gRPC servers on loopback, and K node fetchers as threads, each with its own gRPC channels and
// cache directory. That is the real code path over real sockets, but all of it shares this
// machine's cores and disk, which the JSON says. Phase (d) then runs the peer (`exaserved`) and
// one node (`exaserve-cli model pull`) as separate processes pinned to separate CPUs.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exa::tools {

struct WeightsBenchOptions {
  std::string dir = "/tmp";  // scratch space; everything written is removed at the end
  uint64_t model_bytes = 2ull << 30;
  int files = 8;  // shards, like model-0000N-of-0000F.safetensors
  uint64_t chunk_bytes = 64ull << 20;
  int nodes = 8;
  int parallel = 8;
  std::vector<int> streams{1, 4, 8, 16};
  // (d) the peer (exaserved) and the node (exaserve-cli) as processes on CPUs of their own.
  bool split_cores = true;
  int peer_cpu = -1;    // -1: the first CPU this process may use
  int node_cpu = -1;    // -1: the second
  int repeats = 3;      // pulls per stream count in (d); the median is reported
  std::string bin_dir;  // where exaserved and exaserve-cli are; default: beside this binary
};

absl::StatusOr<nlohmann::json> RunWeightsBench(const WeightsBenchOptions& options);

}  // namespace exa::tools
