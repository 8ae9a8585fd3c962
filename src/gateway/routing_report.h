// What a gateway's /metrics says about its routing (docs/architecture.md#routing), for
// `exaserve-cli routing`: the policy it routes by, how many decisions landed on a replica that
// held part of the prompt, the prefix hit ratio it expected, and the router's estimated time to
// first token against the actual one (the metrics are in docs/reference/metrics.md).
//
//   auto samples = metrics::ParseExposition(body, gateway::IsRoutingMetric);
//   absl::StatusOr<gateway::RoutingReport> report = gateway::SummarizeRouting(*samples);
//
// Pure: parsed samples in, figures out. Counters and histograms count since the gateway started.
// Thread-safety: plain data and functions without state.
#pragma once

#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "metrics/exposition_parser.h"

namespace exa::gateway {

inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

// The metric families SummarizeRouting reads: a scrape may keep only these.
bool IsRoutingMetric(std::string_view name);

// One latency histogram, in seconds; NaN figures without observations.
struct LatencySummary {
  double count = 0;
  double mean_seconds = kNoValue;
  double p50_seconds = kNoValue;
  double p99_seconds = kNoValue;
};

struct RoutingReport {
  std::string policy;             // gateway.routing_policy; "" from a gateway that predates it
  double decisions = 0;           // replicas chosen for requests, retries included
  double cache_decisions = 0;     // of those, onto a replica holding part of the prompt
  double prompt_tokens = 0;       // prompt tokens of the routed requests
  double cached_tokens = 0;       // of those, held by the chosen replica (the prefix index)
  LatencySummary ttft;            // actual time to first token
  LatencySummary ttft_estimated;  // the router's estimate at admission (once its fit has 32)
  double estimate_ratio_p50 = kNoValue;  // actual / estimated, the median request
  // Share of estimated requests whose actual wait was within (0.8, 1.25] of the estimate.
  double estimate_near_share = kNoValue;

  double CacheDecisionShare() const;  // cache_decisions / decisions; NaN without decisions
  double PrefixHitRatio() const;      // cached_tokens / prompt_tokens; NaN without tokens
};

// INVALID_ARGUMENT when the samples lack exaserve_gateway_routing_decisions_total: the metrics
// are not a gateway's.
absl::StatusOr<RoutingReport> SummarizeRouting(const std::vector<metrics::ParsedSample>& samples);

}  // namespace exa::gateway
