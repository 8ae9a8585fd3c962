// The /metrics text is valid Prometheus exposition 0.0.4 with correct values and escaping.
#include "metrics/registry.h"

#include <thread>

#include <catch2/catch.hpp>

namespace exa::metrics {
namespace {

TEST_CASE("Counters, gauges and labels expose in text format 0.0.4", "[metrics]") {
  Registry r;
  auto& requests = r.AddCounter("exa_requests_total", "Requests served.", {"path", "code"});
  requests.WithLabels({"/v1/completions", "200"}).Increment(3);
  requests.WithLabels({"/healthz", "200"}).Increment();
  r.SimpleGauge("exa_queue_depth", "Queued requests.").Set(2.5);
  CHECK(r.Expose() ==
        "# HELP exa_requests_total Requests served.\n"
        "# TYPE exa_requests_total counter\n"
        "exa_requests_total{path=\"/healthz\",code=\"200\"} 1\n"
        "exa_requests_total{path=\"/v1/completions\",code=\"200\"} 3\n"
        "# HELP exa_queue_depth Queued requests.\n"
        "# TYPE exa_queue_depth gauge\n"
        "exa_queue_depth 2.5\n");
}

TEST_CASE("Histograms expose cumulative buckets, sum and count", "[metrics]") {
  Registry r;
  auto& h = r.AddHistogram("exa_latency_seconds", "Latency.", {"op"}, {0.1, 1}).WithLabels({"x"});
  h.Observe(0.05);
  h.Observe(0.1);  // on the bound: counts in le="0.1"
  h.Observe(0.5);
  h.Observe(7);
  CHECK(r.Expose() ==
        "# HELP exa_latency_seconds Latency.\n"
        "# TYPE exa_latency_seconds histogram\n"
        "exa_latency_seconds_bucket{op=\"x\",le=\"0.1\"} 2\n"
        "exa_latency_seconds_bucket{op=\"x\",le=\"1\"} 3\n"
        "exa_latency_seconds_bucket{op=\"x\",le=\"+Inf\"} 4\n"
        "exa_latency_seconds_sum{op=\"x\"} 7.65\n"
        "exa_latency_seconds_count{op=\"x\"} 4\n");
}

TEST_CASE("Label values and help text are escaped", "[metrics]") {
  Registry r;
  r.AddGauge("exa_model_info", "Line one\nback\\slash", {"model"})
      .WithLabels({"we\"ird\\na\nme"})
      .Set(1);
  std::string text = r.Expose();
  CHECK(text.find("# HELP exa_model_info Line one\\nback\\\\slash\n") != std::string::npos);
  CHECK(text.find("exa_model_info{model=\"we\\\"ird\\\\na\\nme\"} 1\n") != std::string::npos);
}

TEST_CASE("Series per family are bounded", "[metrics]") {
  Registry r;
  auto& f = r.AddCounter("exa_by_client_total", "Per client.", {"client"});
  for (size_t i = 0; i < Family<Counter>::kMaxSeries + 50; ++i) {
    f.WithLabels({std::to_string(i)}).Increment();
  }
  CHECK(f.WithLabels({"_overflow_"}).Value() == 50);
}

TEST_CASE("Concurrent increments are not lost", "[metrics]") {
  Registry r;
  Counter& c = r.SimpleCounter("exa_hits_total", "Hits.");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) c.Increment();
    });
  }
  for (auto& t : threads) t.join();
  CHECK(c.Value() == 40000);
}

TEST_CASE("Process metrics report real values", "[metrics]") {
  Registry r;
  RegisterProcessMetrics(r, "1.2.3");
  std::string text = r.Expose();
  CHECK(text.find("exaserve_build_info{version=\"1.2.3\"} 1\n") != std::string::npos);
  CHECK(text.find("# TYPE process_cpu_seconds_total counter\n") != std::string::npos);
  CHECK(text.find("process_resident_memory_bytes 0\n") == std::string::npos);
  CHECK(text.find("process_open_fds 0\n") == std::string::npos);
}

}  // namespace
}  // namespace exa::metrics
