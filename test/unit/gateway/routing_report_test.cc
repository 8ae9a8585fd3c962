// A gateway's routing figures come out of its exposition as `exaserve-cli routing` prints them:
// the policy label, the share of decisions onto cached prefixes, the prefix hit ratio, the
// medians of actual and estimated time to first token and how often the estimate was near;
// metrics that are not a gateway's are refused.
#include "gateway/routing_report.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "metrics/registry.h"

namespace exa::gateway {
namespace {

absl::StatusOr<RoutingReport> FromRegistry(const metrics::Registry& registry) {
  auto samples = metrics::ParseExposition(registry.Expose(), IsRoutingMetric);
  REQUIRE(samples.ok());
  return SummarizeRouting(*samples);
}

TEST_CASE("routing figures from a gateway's metrics") {
  metrics::Registry registry;
  registry.AddCounterCallback("exaserve_gateway_routing_decisions_total", "d", [] { return 40; });
  registry.AddCounterCallback("exaserve_gateway_routing_cache_hits_total", "c", [] { return 10; });
  registry.AddCounterCallback("exaserve_gateway_routed_prompt_tokens_total", "p",
                              [] { return 4000; });
  registry.AddCounterCallback("exaserve_gateway_routed_cached_tokens_total", "t",
                              [] { return 1000; });
  registry.AddGauge("exaserve_gateway_routing_policy_info", "i", {"policy"})
      .WithLabels({"round-robin"})
      .Set(1);
  auto& ttft =
      registry
          .AddHistogram("exaserve_gateway_ttft_seconds", "a", {}, metrics::LatencyBucketsSeconds())
          .WithLabels({});
  auto& estimated = registry
                        .AddHistogram("exaserve_gateway_ttft_estimated_seconds", "e", {},
                                      metrics::LatencyBucketsSeconds())
                        .WithLabels({});
  auto& ratio = registry
                    .AddHistogram("exaserve_gateway_ttft_estimate_ratio", "r", {},
                                  {0.25, 0.5, 0.67, 0.8, 0.9, 1.1, 1.25, 1.5, 2, 4})
                    .WithLabels({});
  // A registry that is not a gateway's (an inference node's) has none of the counters.
  CHECK(FromRegistry(metrics::Registry()).status().code() == absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 40; ++i) ttft.Observe(0.2);
  for (int i = 0; i < 20; ++i) estimated.Observe(0.1);
  for (int i = 0; i < 15; ++i) ratio.Observe(1.0);  // near the estimate
  for (int i = 0; i < 5; ++i) ratio.Observe(3.0);   // three times slower than estimated

  absl::StatusOr<RoutingReport> r = FromRegistry(registry);
  REQUIRE(r.ok());
  CHECK(r->policy == "round-robin");
  CHECK(r->decisions == 40);
  CHECK(r->CacheDecisionShare() == Approx(0.25));
  CHECK(r->PrefixHitRatio() == Approx(0.25));
  CHECK(r->ttft.count == 40);
  CHECK(r->ttft.mean_seconds == Approx(0.2));
  // Interpolated inside the bucket that holds 0.2, as Prometheus' histogram_quantile does.
  CHECK(r->ttft.p50_seconds > 0.1);
  CHECK(r->ttft.p50_seconds <= 0.25);
  CHECK(r->ttft_estimated.count == 20);
  CHECK(r->ttft_estimated.p50_seconds < r->ttft.p50_seconds);
  CHECK(r->estimate_ratio_p50 > 0.9);
  CHECK(r->estimate_ratio_p50 <= 1.1);
  CHECK(r->estimate_near_share == Approx(0.75));
}

TEST_CASE("a gateway without traffic has decisions but no figures to divide") {
  metrics::Registry registry;
  registry.AddCounterCallback("exaserve_gateway_routing_decisions_total", "d", [] { return 0; });
  absl::StatusOr<RoutingReport> r = FromRegistry(registry);
  REQUIRE(r.ok());
  CHECK(r->policy.empty());
  CHECK(std::isnan(r->CacheDecisionShare()));
  CHECK(std::isnan(r->PrefixHitRatio()));
  CHECK(std::isnan(r->ttft.p50_seconds));
  CHECK(std::isnan(r->estimate_ratio_p50));
  CHECK(std::isnan(r->estimate_near_share));
}

}  // namespace
}  // namespace exa::gateway
