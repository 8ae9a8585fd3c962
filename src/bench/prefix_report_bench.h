// exaserve-bench prefix-report: what the cached-block report costs on the load stream
// (docs/perf/prefix-report.md). One node's replicas (sim backend, virtual time) replay a trace
// whose requests share prefixes — the Mooncake conversation trace, its hash_ids turned into
// token blocks — while the node's load report is built every 100 ms exactly as Node.WatchLoad
// builds it (node::AddCacheDeltas, node::ToProto). Prints the bytes per second of the report
// with and without the cache deltas, and the deltas' share of the load stream plus the node's
// gossip traffic (a figure given on the command line, from `exaserve-sim gossip`).
//
// Thread safety: a program entry point; one thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/kv_cache.h"
#include "nlohmann/json.hpp"

namespace exa::bench {

struct PrefixReportOptions {
  std::string trace;  // Mooncake-format JSONL: timestamp (ms), input_length, output_length,
                      // hash_ids (one per 512-token block)
  int replicas = 12;
  double speedup = 1.0;     // trace time / replay time
  double duration_s = 600;  // replayed (virtual) seconds; 0: the whole trace
  double report_hz = 10;    // the node's load report rate
  ReportSchedule report = engine::PrefixCacheOptions().report;
  int64_t kv_tokens = 163840;  // per replica
  int32_t max_context = 131072;
  double gossip_bytes_per_s = 1300;  // the node's gossip traffic (exaserve-sim gossip, N=256)
};

absl::StatusOr<nlohmann::json> RunPrefixReportBench(const PrefixReportOptions& options);

}  // namespace exa::bench
