// Health of one replica at the first two of the three levels (docs/architecture.md#health-checks):
//   process level — every process_interval the engine's step counter must move whenever it
//     has work; a step loop that is stuck while the process lives is the common failure that a
//     port check misses;
//   model level — every model_interval a light probe (default "1+1=" must contain "2") must
//     answer within probe_timeout; for a model without an expected answer, the greedy output
//     recorded at the first probe is the golden answer.
// (The performance level — P99 against the replica's peers — needs several replicas' latency and
// lives with the gateway.) Pure: observations come in as arguments; the caller keeps time.
//
// Thread safety: none; one owner (the daemon's health timer) calls it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "config/schema.h"

namespace exa::node {

struct HealthOptions {
  absl::Duration process_interval = absl::Seconds(10);  // docs/architecture.md#health-checks
  absl::Duration model_interval = absl::Seconds(30);    // docs/architecture.md#health-checks
  absl::Duration probe_timeout = absl::Seconds(10);
  std::string probe_prompt = "1+1=";  // the source document's probe
  std::string probe_expect = "2";     // empty: the first answer becomes the golden one
  int probe_max_tokens = 8;
  // Performance level (gateways): a replica whose inter-token P99 exceeds `performance_factor`
  // × the median of its model's replicas is ejected from routing (not killed) until the next
  // evaluation finds it back within the factor. Needs performance_min_peers replicas reporting.
  absl::Duration performance_interval = absl::Minutes(5);  // docs/architecture.md#health-checks
  double performance_factor = 1.5;
  int performance_min_peers = 3;
};

void RegisterConfig(config::Schema& schema, std::string_view section, HealthOptions* options);

class ReplicaHealth {
 public:
  explicit ReplicaHealth(const HealthOptions& options) : options_(options) {}

  // Process level: the engine's step count now and whether it had work since the last check.
  void OnProcessCheck(uint64_t steps, bool has_work);
  // Model level: `answer` is the probe's text, nullopt if none came back before the timeout.
  void OnProbeResult(const std::optional<std::string>& answer);

  bool healthy() const { return stalled_reason_.empty() && probe_reason_.empty(); }
  // Why not healthy ("" when healthy), for logs, metrics and exaserve-cli.
  std::string reason() const;
  uint64_t probes_ok() const { return probes_ok_; }
  uint64_t probes_failed() const { return probes_failed_; }
  const std::string& golden() const { return golden_; }

 private:
  const HealthOptions options_;
  bool have_steps_ = false;
  uint64_t last_steps_ = 0;
  std::string stalled_reason_;
  bool had_work_ = false;
  std::string probe_reason_;
  std::string golden_;
  uint64_t probes_ok_ = 0;
  uint64_t probes_failed_ = 0;
};

}  // namespace exa::node
