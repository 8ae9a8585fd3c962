// The five docs/architecture.md#monitoring-and-alerts rules on a manual clock: each fires only once
// its condition has held for its duration, resolves when the condition clears, holds its state
// while no data arrives, and the evaluator's memory stays bounded however many series the cluster
// exports.
#include "metrics/alert_rules.h"

#include <cmath>
#include <functional>

#include <catch2/catch.hpp>

#include "common/clock.h"
#include "common/strings.h"

namespace exa::metrics {
namespace {

using absl::Minutes;
using absl::Seconds;

struct Transition {
  absl::Duration at;  // since the harness started
  Alert alert;
};

// Scrapes targets on a manual clock and evaluates after each round, as the observer does.
class Harness {
 public:
  explicit Harness(AlertRulesConfig config = {}) : eval_(std::move(config)), start_(clock_.Now()) {}

  void Scrape(const std::string& instance, const std::string& text) {
    auto samples = ParseExposition(text, [this](std::string_view n) { return eval_.Wants(n); });
    REQUIRE(samples.ok());
    eval_.Ingest(clock_.Now(), {instance, "node-" + instance}, *samples);
  }
  void Fail(const std::string& instance) {
    eval_.ScrapeFailed(clock_.Now(), {instance, "node-" + instance});
  }

  // Every `step` for `duration`: `round` scrapes (given the elapsed time), then the evaluator
  // runs; transitions are collected with their times.
  void Run(absl::Duration duration, absl::Duration step,
           const std::function<void(absl::Duration elapsed)>& round) {
    const absl::Time end = clock_.Now() + duration;
    while (clock_.Now() < end) {
      clock_.Advance(step);
      round(clock_.Now() - start_);
      for (Alert& a : eval_.Evaluate(clock_.Now())) {
        transitions_.push_back({clock_.Now() - start_, std::move(a)});
      }
    }
  }

  // The first transition of `name` into `state`, or nullptr.
  const Transition* First(std::string_view name, AlertState state) const {
    for (const Transition& t : transitions_) {
      if (t.alert.name == name && t.alert.state == state) return &t;
    }
    return nullptr;
  }
  std::vector<Alert> Alerts() const { return eval_.Alerts(); }
  AlertEvaluator& eval() { return eval_; }
  const std::vector<Transition>& transitions() const { return transitions_; }

 private:
  ManualClock clock_;
  AlertEvaluator eval_;
  const absl::Time start_;
  std::vector<Transition> transitions_;
};

std::string Deployment(const std::string& name, int desired, int ready) {
  return StrCat("exaserve_deployment_replicas_desired{deployment=\"", name, "\"} ", desired,
                "\nexaserve_deployment_replicas_ready{deployment=\"", name, "\"} ", ready, "\n");
}

TEST_CASE("Replicas short fires P0 only after 5 minutes below 95 % and resolves on recovery",
          "[metrics][alerts]") {
  Harness h;
  // Every 10 s: 3 of 3 ready until 60 s, then 1 of 3 until 8 min, then 3 again.
  h.Run(Minutes(10), Seconds(10), [&](absl::Duration t) {
    h.Scrape("sched:1", Deployment("tiny", 3, t > Seconds(60) && t <= Minutes(8) ? 1 : 3));
  });
  const Transition* fired = h.First("ExaServeReplicasShort", AlertState::kFiring);
  REQUIRE(fired != nullptr);
  // Pending from the first sample below (70 s), firing 5 min later.
  CHECK(fired->at == Seconds(70) + Minutes(5));
  CHECK(fired->alert.severity == "P0");
  CHECK(LabelValue(fired->alert.labels, "deployment") == "tiny");
  CHECK(LabelValue(fired->alert.labels, "alertname") == "ExaServeReplicasShort");
  CHECK(fired->alert.value == Approx(1.0 / 3));
  CHECK(fired->alert.summary.find("1 of 3 replicas ready") != std::string::npos);
  const Transition* resolved = h.First("ExaServeReplicasShort", AlertState::kResolved);
  REQUIRE(resolved != nullptr);
  CHECK(resolved->at == Minutes(8) + Seconds(10));
  CHECK(h.transitions().size() == 2);
  auto alerts = h.Alerts();
  REQUIRE(alerts.size() == 1);
  CHECK(alerts[0].state == AlertState::kResolved);
  CHECK(alerts[0].fired_at < alerts[0].resolved_at);
}

TEST_CASE("A shortage shorter than the duration never fires", "[metrics][alerts]") {
  Harness h;
  bool pending_seen = false;
  h.Run(Minutes(10), Seconds(10), [&](absl::Duration t) {
    const bool short_now = t > Minutes(1) && t <= Minutes(5);  // 4 minutes < 5
    h.Scrape("sched:1", Deployment("tiny", 4, short_now ? 3 : 4));
    if (t == Minutes(4)) {
      auto alerts = h.Alerts();
      pending_seen = alerts.size() == 1 && alerts[0].state == AlertState::kPending;
    }
  });
  CHECK(pending_seen);
  CHECK(h.transitions().empty());
  CHECK(h.Alerts().empty());  // a pending alert that clears leaves nothing behind
}

TEST_CASE("The replica rule takes the max over schedulers and holds without data",
          "[metrics][alerts]") {
  AlertRulesConfig config;
  config.replicas.for_duration = Seconds(30);
  Harness h(config);
  // One scheduler lags (ready 0) while another sees every replica: no alert.
  h.Run(Minutes(1), Seconds(10), [&](absl::Duration) {
    h.Scrape("sched:1", Deployment("a", 2, 0));
    h.Scrape("sched:2", Deployment("a", 2, 2));
  });
  CHECK(h.transitions().empty());
  // Both see a shortage: fires after 30 s.
  h.Run(Minutes(1), Seconds(10), [&](absl::Duration) {
    h.Scrape("sched:1", Deployment("a", 2, 1));
    h.Scrape("sched:2", Deployment("a", 2, 1));
  });
  REQUIRE(h.First("ExaServeReplicasShort", AlertState::kFiring) != nullptr);
  // Every scheduler stops answering: silence is not recovery.
  h.Run(Minutes(2), Seconds(10), [&](absl::Duration) {
    h.Fail("sched:1");
    h.Fail("sched:2");
  });
  CHECK(h.First("ExaServeReplicasShort", AlertState::kResolved) == nullptr);
  REQUIRE(h.Alerts().size() == 1);
  CHECK(h.Alerts()[0].state == AlertState::kFiring);
  // A scheduler that leaves the cluster stops counting at once: its last figures (all ready)
  // would otherwise hide the shortage the other one sees.
  h.Run(Seconds(10), Seconds(10), [&](absl::Duration) {
    h.eval().SetTargets({{"sched:2", "node-sched:2"}});
    h.Scrape("sched:2", Deployment("a", 2, 1));
  });
  CHECK(h.First("ExaServeReplicasShort", AlertState::kResolved) == nullptr);
  h.Run(Seconds(10), Seconds(10), [&](absl::Duration) {
    h.Scrape("sched:1", Deployment("a", 2, 2));  // still reported by the departed scheduler
    h.eval().SetTargets({{"sched:2", "node-sched:2"}});
    h.Scrape("sched:2", Deployment("a", 2, 1));
  });
  CHECK(h.First("ExaServeReplicasShort", AlertState::kResolved) == nullptr);
  // A deleted deployment (desired 0) resolves.
  h.Run(Seconds(10), Seconds(10),
        [&](absl::Duration) { h.Scrape("sched:2", Deployment("a", 0, 0)); });
  CHECK(h.First("ExaServeReplicasShort", AlertState::kResolved) != nullptr);
}

TEST_CASE("Rules are evaluated at their own sampling interval", "[metrics][alerts]") {
  AlertRulesConfig config;
  config.replicas.interval = Seconds(30);
  config.replicas.for_duration = Seconds(0);
  Harness h(config);
  h.Run(Seconds(10), Seconds(10), [&](absl::Duration) { h.Scrape("s:1", Deployment("a", 1, 1)); });
  // Short from 10 s on, scraped every 10 s; the rule next runs at 40 s.
  h.Run(Minutes(1), Seconds(10), [&](absl::Duration) { h.Scrape("s:1", Deployment("a", 1, 0)); });
  const Transition* fired = h.First("ExaServeReplicasShort", AlertState::kFiring);
  REQUIRE(fired != nullptr);
  CHECK(fired->at == Seconds(40));
}

std::string Histogram(const std::string& name,
                      const std::vector<std::pair<std::string, double>>& b) {
  std::string out;
  for (const auto& [le, count] : b) StrAppend(&out, name, "_bucket{le=\"", le, "\"} ", count, "\n");
  return out;
}

TEST_CASE("Histogram quantiles follow Prometheus", "[metrics][alerts]") {
  const double inf = INFINITY;
  CHECK(std::isnan(HistogramQuantile(0.99, {{1, 0}, {inf, 0}})));
  CHECK(HistogramQuantile(0.5, {{1, 50}, {2, 100}, {inf, 100}}) == Approx(1.0));
  CHECK(HistogramQuantile(0.99, {{1, 50}, {2, 100}, {inf, 100}}) == Approx(1.98));
  CHECK(HistogramQuantile(0.5, {{1, 100}, {inf, 100}}) == Approx(0.5));
  CHECK(HistogramQuantile(0.99, {{1, 10}, {2, 10}, {inf, 100}}) == 2);  // in +Inf: last bound
}

TEST_CASE("Latency P99 over 2 s at the gateways fires P1 after 3 minutes", "[metrics][alerts]") {
  Harness h;
  double fast = 0, slow = 0;
  // Two gateways; from 1 min on, 5 % of requests take 2.5-5 s; from 9 min on traffic is fast.
  h.Run(Minutes(12), Seconds(10), [&](absl::Duration t) {
    fast += 95;
    slow += t > Minutes(1) && t <= Minutes(9) ? 5 : 0;
    for (const char* gw : {"gw:1", "gw:2"}) {
      h.Scrape(gw, Histogram("exaserve_gateway_ttft_seconds", {{"0.5", fast},
                                                               {"2", fast},
                                                               {"2.5", fast},
                                                               {"5", fast + slow},
                                                               {"+Inf", fast + slow}}));
    }
  });
  const Transition* fired = h.First("ExaServeLatencyP99High", AlertState::kFiring);
  REQUIRE(fired != nullptr);
  CHECK(fired->alert.severity == "P1");
  CHECK(fired->alert.value > 2);
  // Slow requests start at 70 s; the rule runs every 30 s and needs them above 1 % of the
  // window's requests to see P99 move; it fires 3 min after it first saw it.
  CHECK(fired->at >= Seconds(70) + Minutes(3));
  CHECK(fired->at <= Seconds(70) + Minutes(3) + Seconds(60));
  const Transition* resolved = h.First("ExaServeLatencyP99High", AlertState::kResolved);
  REQUIRE(resolved != nullptr);
  // The 2-minute window must first forget the slow requests.
  CHECK(resolved->at > Minutes(9));
  CHECK(resolved->at <= Minutes(11) + Seconds(30));
}

TEST_CASE("GPU memory over 90 % for 10 minutes fires P2; CPU nodes compare RSS with budget",
          "[metrics][alerts]") {
  Harness h;
  h.Run(Minutes(11), Seconds(30), [&](absl::Duration) {
    h.Scrape("gpu:1",
             "exaserve_gpu_memory_used_bytes{device=\"0\"} 95\n"
             "exaserve_gpu_memory_total_bytes{device=\"0\"} 100\n"
             "exaserve_gpu_memory_used_bytes{device=\"1\"} 50\n"
             "exaserve_gpu_memory_total_bytes{device=\"1\"} 100\n");
    h.Scrape("cpu:1",
             "process_resident_memory_bytes 3.8e9\nexaserve_host_memory_budget_bytes 4e9\n");
  });
  std::vector<std::string> fired;
  for (const Transition& t : h.transitions()) {
    CHECK(t.alert.name == "ExaServeGpuMemoryHigh");
    CHECK(t.alert.severity == "P2");
    CHECK(t.at == Minutes(10) + Seconds(30));  // first seen at 30 s
    fired.push_back(
        StrCat(LabelValue(t.alert.labels, "node"), "/", LabelValue(t.alert.labels, "device")));
  }
  std::sort(fired.begin(), fired.end());
  CHECK(fired == std::vector<std::string>{"node-cpu:1/host", "node-gpu:1/0"});
  // The GPU node stops answering: its alert holds; it answers again below the threshold:
  // resolved.
  h.Run(Minutes(2), Seconds(30), [&](absl::Duration) { h.Fail("gpu:1"); });
  CHECK(h.First("ExaServeGpuMemoryHigh", AlertState::kResolved) == nullptr);
  h.Run(Seconds(30), Seconds(30), [&](absl::Duration) {
    h.Scrape("gpu:1",
             "exaserve_gpu_memory_used_bytes{device=\"0\"} 50\n"
             "exaserve_gpu_memory_total_bytes{device=\"0\"} 100\n");
  });
  const Transition* resolved = h.First("ExaServeGpuMemoryHigh", AlertState::kResolved);
  REQUIRE(resolved != nullptr);
  CHECK(LabelValue(resolved->alert.labels, "node") == "node-gpu:1");
}

TEST_CASE("GPU memory: what the device reports wins over what the ledger promised",
          "[metrics][alerts]") {
  // Device 0: promised 50 %, but the device (another process, fragmentation) is 95 % full:
  // fires. Device 1: promised 95 %, the device 60 %: quiet. Device 2 has no device reading
  // (no NVML): the ledger decides, 95 %: fires.
  Harness h;
  h.Run(Minutes(11), Seconds(30), [&](absl::Duration) {
    h.Scrape("gpu:1",
             "exaserve_gpu_memory_used_bytes{device=\"0\"} 50\n"
             "exaserve_gpu_memory_total_bytes{device=\"0\"} 100\n"
             "exaserve_gpu_device_memory_used_bytes{device=\"0\"} 95\n"
             "exaserve_gpu_device_memory_total_bytes{device=\"0\"} 100\n"
             "exaserve_gpu_memory_used_bytes{device=\"1\"} 95\n"
             "exaserve_gpu_memory_total_bytes{device=\"1\"} 100\n"
             "exaserve_gpu_device_memory_used_bytes{device=\"1\"} 60\n"
             "exaserve_gpu_device_memory_total_bytes{device=\"1\"} 100\n"
             "exaserve_gpu_memory_used_bytes{device=\"2\"} 95\n"
             "exaserve_gpu_memory_total_bytes{device=\"2\"} 100\n");
  });
  std::vector<std::string> fired;
  for (const Transition& t : h.transitions()) {
    REQUIRE(t.alert.name == "ExaServeGpuMemoryHigh");
    fired.push_back(std::string(LabelValue(t.alert.labels, "device")));
  }
  std::sort(fired.begin(), fired.end());
  CHECK(fired == std::vector<std::string>{"0", "2"});
}

TEST_CASE("Network over 80 % of link speed for 5 minutes fires", "[metrics][alerts]") {
  Harness h;
  double rx = 0, tx = 0;
  const double speed = 1.25e9;  // 10 Gbit/s
  h.Run(Minutes(8), Minutes(1), [&](absl::Duration) {
    rx += 0.9 * speed * 60;  // 90 %
    tx += 0.1 * speed * 60;
    h.Scrape("n:1", StrCat("exaserve_network_receive_bytes_total{device=\"eth0\"} ", rx,
                           "\nexaserve_network_transmit_bytes_total{device=\"eth0\"} ", tx,
                           "\nexaserve_network_speed_bytes{device=\"eth0\"} ", speed, "\n"));
  });
  REQUIRE(h.transitions().size() == 1);
  const Transition& t = h.transitions()[0];
  CHECK(t.alert.name == "ExaServeNetworkSaturated");
  CHECK(LabelValue(t.alert.labels, "direction") == "receive");
  CHECK(t.alert.value == Approx(0.9));
  // A rate needs two samples (2 min), then 5 min.
  CHECK(t.at == Minutes(7));
}

TEST_CASE("A model load over 30 s fires at once, per load, and resolves later",
          "[metrics][alerts]") {
  Harness h;
  std::string replicas = "exaserve_replica_weight_load_seconds{replica=\"r0\",model=\"m\"} 12\n";
  double pulls = 1, fast = 1;
  h.Run(Minutes(1), Seconds(10), [&](absl::Duration t) {
    if (t == Seconds(30)) {
      replicas += "exaserve_replica_weight_load_seconds{replica=\"r1\",model=\"m\"} 42.5\n";
    }
    if (t == Seconds(50)) pulls += 1;  // one pull slower than 30 s
    h.Scrape("n:1", replicas + StrCat("exaserve_weights_pull_seconds_bucket{le=\"15\"} ", fast,
                                      "\nexaserve_weights_pull_seconds_bucket{le=\"30\"} ", fast,
                                      "\nexaserve_weights_pull_seconds_bucket{le=\"+Inf\"} ", pulls,
                                      "\nexaserve_weights_pull_seconds_count ", pulls, "\n"));
  });
  REQUIRE(h.transitions().size() == 2);
  CHECK(h.transitions()[0].at == Seconds(30));
  CHECK(LabelValue(h.transitions()[0].alert.labels, "replica") == "r1");
  CHECK(LabelValue(h.transitions()[0].alert.labels, "stage") == "device");
  CHECK(h.transitions()[0].alert.value == 42.5);
  CHECK(h.transitions()[1].at == Seconds(50));
  CHECK(LabelValue(h.transitions()[1].alert.labels, "stage") == "pull");
  // The same loads are not new: nothing more until the alerts resolve 5 min after them.
  h.Run(Minutes(6), Seconds(10), [&](absl::Duration) { h.Scrape("n:1", replicas); });
  const Transition* resolved = h.First("ExaServeModelLoadSlow", AlertState::kResolved);
  REQUIRE(resolved != nullptr);
  CHECK(resolved->at == Seconds(30) + Minutes(5));
  CHECK(h.transitions().size() == 4);
}

TEST_CASE("Memory stays bounded: series, points per series and forgotten targets",
          "[metrics][alerts]") {
  AlertRulesConfig config;
  config.max_series = 100;
  config.history_samples = 8;
  Harness h(config);
  std::string many;
  for (int i = 0; i < 500; ++i) {
    StrAppend(&many, "exaserve_network_receive_bytes_total{device=\"eth", i, "\"} 1\n");
  }
  many += "exaserve_unrelated_metric{x=\"y\"} 1\n";  // not read by any rule: not kept
  h.Run(Minutes(1), Seconds(1), [&](absl::Duration) { h.Scrape("n:1", many); });
  AlertEvaluator::Stats s = h.eval().stats();
  CHECK(s.series == 100);
  CHECK(s.series_dropped == 400 * 60);
  CHECK(s.points == 100 * 8);
  // The node leaves: after the look-back everything it sent is gone.
  h.Run(Minutes(10), Seconds(10), [&](absl::Duration) { h.Scrape("other:1", "x 1\n"); });
  s = h.eval().stats();
  CHECK(s.series == 0);
  CHECK(s.points == 0);
  CHECK(s.targets == 1);
}

TEST_CASE("Resolved alerts are remembered for a bounded time and number", "[metrics][alerts]") {
  AlertRulesConfig config;
  config.replicas.for_duration = absl::ZeroDuration();
  config.max_resolved = 3;
  config.resolved_retention = Minutes(5);
  Harness h(config);
  // Five deployments each short for one round, then fine.
  for (int i = 0; i < 5; ++i) {
    const std::string name = StrCat("d", i);
    h.Run(Seconds(20), Seconds(10), [&](absl::Duration) {});
    h.Run(Seconds(10), Seconds(10),
          [&](absl::Duration) { h.Scrape("s:1", Deployment(name, 1, 0)); });
    h.Run(Seconds(10), Seconds(10),
          [&](absl::Duration) { h.Scrape("s:1", Deployment(name, 1, 1)); });
  }
  auto alerts = h.Alerts();
  REQUIRE(alerts.size() == 3);
  CHECK(LabelValue(alerts[0].labels, "deployment") == "d4");  // newest first
  h.Run(Minutes(6), Seconds(10), [&](absl::Duration) {});
  CHECK(h.Alerts().empty());
}

}  // namespace
}  // namespace exa::metrics
