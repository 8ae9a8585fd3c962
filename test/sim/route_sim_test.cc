// A seconds-long run of `exaserve-bench route --mode sim` (the full benchmark is not part of the
// test suite): the JSON has the documented shape, the figures are sane (every request completes
// under light load, latencies ordered, goodput near the offered load), and a fixed seed gives the
// same answer twice.
#include <catch2/catch.hpp>

#include "bench/route_bench.h"

namespace exa::bench {
namespace {

RouteSimOptions Small() {
  RouteSimOptions o;
  o.replicas = 4;
  o.replicas_per_node = 2;
  o.gateways = 2;
  o.rhos = {0.5};
  o.policies = {"token-aware", "round-robin"};
  o.requests = 300;
  o.capacity_requests = 300;
  return o;
}

TEST_CASE("route sim: JSON shape, sanity and reproducibility", "[sim][route]") {
  auto out = RunRouteSim(Small());
  REQUIRE(out.ok());
  const nlohmann::json& j = *out;
  CHECK(j["mode"] == "sim");
  const double capacity = j["capacity"]["total_requests_per_s"].get<double>();
  CHECK(capacity > 4 * 1.0);   // a 13B replica does a few requests per second...
  CHECK(capacity < 4 * 20.0);  // ...not dozens
  REQUIRE(j["results"].size() == 2);
  for (const auto& r : j["results"]) {
    CHECK(r["completed"] == 300);
    CHECK(r["rejections"] == 0);
    CHECK(r["failed"] == 0);
    const double ttft50 = r["ttft_ms"]["p50"], ttft99 = r["ttft_ms"]["p99"];
    const double e2e50 = r["e2e_ms"]["p50"], e2e99 = r["e2e_ms"]["p99"];
    CHECK(ttft50 > 0);
    CHECK(ttft50 <= ttft99);
    CHECK(e2e50 > ttft50);
    CHECK(e2e50 <= e2e99);
    // ~200 tokens at >= 20 ms a step: a median request takes seconds.
    CHECK(e2e50 > 2000);
    const double goodput = r["goodput"]["requests_per_s"];
    CHECK(goodput == Approx(0.5 * capacity).epsilon(0.35));
  }
  REQUIRE(j["comparisons"].size() == 1);
  CHECK(j["comparisons"][0].contains("round-robin"));
  auto again = RunRouteSim(Small());
  REQUIRE(again.ok());
  CHECK(again->dump() == j.dump());
}

TEST_CASE("route sim: bad options are refused naming the field", "[sim][route]") {
  RouteSimOptions o = Small();
  o.policies = {"fastest"};
  auto out = RunRouteSim(o);
  REQUIRE(out.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(out.status().message()).find("fastest") != std::string::npos);
  o = Small();
  o.rhos = {0};
  CHECK(RunRouteSim(o).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace exa::bench
