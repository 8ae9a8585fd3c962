// A gateway's routing figures from its metrics (routing_report.h). Pure.
#include "gateway/routing_report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <utility>

#include "metrics/alert_rules.h"

namespace exa::gateway {
namespace {

constexpr std::string_view kPrefix = "exaserve_gateway_";
constexpr std::string_view kDecisions = "exaserve_gateway_routing_decisions_total";
constexpr std::string_view kCacheDecisions = "exaserve_gateway_routing_cache_hits_total";
constexpr std::string_view kPromptTokens = "exaserve_gateway_routed_prompt_tokens_total";
constexpr std::string_view kCachedTokens = "exaserve_gateway_routed_cached_tokens_total";
constexpr std::string_view kPolicy = "exaserve_gateway_routing_policy_info";
constexpr std::string_view kTtft = "exaserve_gateway_ttft_seconds";
constexpr std::string_view kTtftEstimated = "exaserve_gateway_ttft_estimated_seconds";
constexpr std::string_view kRatio = "exaserve_gateway_ttft_estimate_ratio";
// The ratio histogram's bounds around 1 (frontend.cc): (0.8, 1.25] is "near the estimate".
constexpr double kNearLow = 0.8;
constexpr double kNearHigh = 1.25;

// A histogram's series summed over its label sets: cumulative count by upper bound, sum, count.
struct Histogram {
  std::map<double, double> buckets;
  double sum = 0;
  double count = 0;
};

double Ratio(double part, double whole) { return whole > 0 ? part / whole : kNoValue; }

double Bound(std::string_view le) {
  if (le == "+Inf") return std::numeric_limits<double>::infinity();
  return std::strtod(std::string(le).c_str(), nullptr);
}

double Quantile(const Histogram& h, double q) {
  const std::vector<std::pair<double, double>> buckets(h.buckets.begin(), h.buckets.end());
  return metrics::HistogramQuantile(q, buckets);
}

LatencySummary Summarize(const Histogram& h) {
  LatencySummary s;
  s.count = h.count;
  if (h.count <= 0) return s;
  s.mean_seconds = h.sum / h.count;
  s.p50_seconds = Quantile(h, 0.5);
  s.p99_seconds = Quantile(h, 0.99);
  return s;
}

// Adds `sample` to the histogram of `family` when it is one of its series.
void AddToHistogram(const metrics::ParsedSample& sample, std::string_view family, Histogram* h) {
  std::string_view name = sample.name;
  if (!name.starts_with(family)) return;
  name.remove_prefix(family.size());
  if (name == "_bucket") {
    h->buckets[Bound(metrics::LabelValue(sample.labels, "le"))] += sample.value;
  } else if (name == "_sum") {
    h->sum += sample.value;
  } else if (name == "_count") {
    h->count += sample.value;
  }
}

// The share of the ratio histogram's observations in (kNearLow, kNearHigh].
double NearShare(const Histogram& ratio) {
  if (ratio.count <= 0) return kNoValue;
  const auto low = ratio.buckets.find(kNearLow);
  const auto high = ratio.buckets.find(kNearHigh);
  if (low == ratio.buckets.end() || high == ratio.buckets.end()) return kNoValue;
  return (high->second - low->second) / ratio.count;
}

}  // namespace

bool IsRoutingMetric(std::string_view name) {
  if (!name.starts_with(kPrefix)) return false;
  for (std::string_view family : {kDecisions, kCacheDecisions, kPromptTokens, kCachedTokens,
                                  kPolicy, kTtft, kTtftEstimated, kRatio}) {
    if (name.starts_with(family)) return true;
  }
  return false;
}

double RoutingReport::CacheDecisionShare() const { return Ratio(cache_decisions, decisions); }
double RoutingReport::PrefixHitRatio() const { return Ratio(cached_tokens, prompt_tokens); }

absl::StatusOr<RoutingReport> SummarizeRouting(const std::vector<metrics::ParsedSample>& samples) {
  RoutingReport r;
  bool gateway = false;
  Histogram ttft, estimated, ratio;
  for (const metrics::ParsedSample& s : samples) {
    if (s.name == kDecisions) {
      gateway = true;
      r.decisions += s.value;
    } else if (s.name == kCacheDecisions) {
      r.cache_decisions += s.value;
    } else if (s.name == kPromptTokens) {
      r.prompt_tokens += s.value;
    } else if (s.name == kCachedTokens) {
      r.cached_tokens += s.value;
    } else if (s.name == kPolicy && s.value > 0) {
      r.policy = metrics::LabelValue(s.labels, "policy");
    } else {
      AddToHistogram(s, kTtft, &ttft);
      AddToHistogram(s, kTtftEstimated, &estimated);
      AddToHistogram(s, kRatio, &ratio);
    }
  }
  if (!gateway) {
    return absl::InvalidArgumentError(std::string("no ") + std::string(kDecisions) +
                                      ": not a gateway's metrics");
  }
  r.ttft = Summarize(ttft);
  r.ttft_estimated = Summarize(estimated);
  if (ratio.count > 0) r.estimate_ratio_p50 = Quantile(ratio, 0.5);
  r.estimate_near_share = NearShare(ratio);
  return r;
}

}  // namespace exa::gateway
