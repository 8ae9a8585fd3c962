// The diurnal scenario's load model (sim/traffic_model.h): the day curve, a batching replica's
// slots and waits, routing to the replica that frees a slot sooner, drains and losses.
#include <catch2/catch.hpp>

#include <vector>

#include "sim/traffic_model.h"

namespace exa::sim {
namespace {

TrafficShape Uniform(int prompt, int output) {
  TrafficShape shape;
  shape.lengths = {{prompt, output}};
  shape.burst = {1.0};
  return shape;
}

TEST_CASE("The day curve: the trough at the start, the peak halfway, peak / trough as asked") {
  TrafficOptions o;
  o.peak_rps = 100;
  o.peak_to_trough = 5;
  TrafficModel m(o, Uniform(100, 10));
  CHECK(m.Rate(0) == Approx(20));
  CHECK(m.Rate(12 * 3600) == Approx(100));
  CHECK(m.Rate(6 * 3600) == Approx(60));
  CHECK(m.Rate(24 * 3600) == Approx(20));  // the next day

  TrafficShape bursty = Uniform(100, 10);
  bursty.burst = {0.5, 1.5};
  TrafficModel b(o, bursty);
  CHECK(b.Rate(12 * 3600) == Approx(50));        // minute 720: even
  CHECK(b.Rate(12 * 3600 + 60) == Approx(150));  // minute 721: odd
}

TEST_CASE("A replica's slots: a request waits only when every slot is busy") {
  TrafficOptions o;
  o.slots = 2;
  o.peak_rps = 30;
  o.peak_to_trough = 1;
  TrafficModel m(o, Uniform(1000, 100));
  const double slot_s = m.MeanSlotSeconds();
  REQUIRE(slot_s > 1);  // 0.13 s of prefill and 100 decode steps
  const std::vector<uint64_t> one = {7};
  m.Step(0, 1, one);  // ~30 arrivals in a second, 2 slots
  ReplicaLoad load = m.Load(7, 1);
  CHECK(load.running == 2);
  CHECK(load.waiting >= 3);
  CHECK(load.queue_s > slot_s);       // the later ones wait for a slot
  CHECK(load.ttft_s > load.queue_s);  // and then their prefill
  CHECK(load.pending_tokens > 1100 * load.waiting);
  CHECK_FALSE(m.Idle(7, 1));
  // Nothing more arrives: it drains, and its pending tokens only fall.
  int64_t before = load.pending_tokens;
  for (double t = 2; t < 1000 && !m.Idle(7, t); t += 1) {
    ReplicaLoad l = m.Load(7, t);
    CHECK(l.pending_tokens <= before);
    before = l.pending_tokens;
  }
  CHECK(m.Idle(7, 1000));
  CHECK(m.Load(7, 1000).pending_tokens == 0);
  m.Forget(7, 1000);
  CHECK(m.lost() == 0);
}

TEST_CASE("Requests go to the replica that frees a slot sooner; losses are counted") {
  TrafficOptions o;
  o.slots = 1;
  o.peak_rps = 20;
  o.peak_to_trough = 1;
  TrafficModel m(o, Uniform(500, 200));
  const std::vector<uint64_t> two = {1, 2};
  m.Step(0, 1, two);
  // About twenty requests over two one-slot replicas, drawn in pairs: both serve.
  ReplicaLoad a = m.Load(1, 1), b = m.Load(2, 1);
  CHECK(a.running == 1);
  CHECK(b.running == 1);
  // A replica removed while it holds requests loses them.
  const int64_t held = a.running + a.waiting;
  m.Forget(1, 1);
  CHECK(m.lost() == held);
  // No ready replica: every arrival is lost.
  m.Step(1, 1, {});
  CHECK(m.lost() > held);
  nlohmann::json f = m.Figures(1);
  CHECK(f["lost"] == m.lost());
  CHECK(f["requests"].get<int64_t>() >= f["lost"].get<int64_t>());
  m.ResetFigures();  // a warm-up's figures are forgotten
  CHECK(m.Figures(1)["requests"] == 0);
  CHECK(m.lost() == 0);
}

TEST_CASE("A replica reports on average its arrival rate times a request's pending token-seconds") {
  // Little's law, which sizes the diurnal scenario's peak (docs/perf/autoscaling.md):
  // slots enough that nothing waits, two request shapes in turn.
  TrafficOptions o;
  o.slots = 64;
  o.peak_rps = 0.5;
  o.peak_to_trough = 1;
  TrafficShape shape;
  shape.lengths = {{1000, 100}, {200, 300}};
  shape.burst = {0.5, 1.5, 1.0};
  TrafficModel m(o, shape);
  CHECK(m.BusiestMinute() == Approx(1.5));
  const std::vector<uint64_t> one = {3};
  double sum = 0;
  int samples = 0;
  for (double t = 0; t < 20000; t += 1) {
    m.Step(t, 1, one);
    if (t < 600) continue;  // the replica fills up first
    sum += static_cast<double>(m.Load(3, t + 1).pending_tokens);
    samples++;
  }
  CHECK(m.Load(3, 20000).waiting == 0);
  const double rate = m.Figures(1)["requests"].get<double>() / 20000;  // as drawn
  CHECK(rate == Approx(0.5).epsilon(0.05));
  CHECK(sum / samples == Approx(rate * m.MeanPendingTokenSeconds()).epsilon(0.1));
}

TEST_CASE("A trace's shape: burstiness per recorded minute, mean 1") {
  traces::Trace t;
  t.path = "t.csv";
  t.duration_s = 180;
  for (int i = 0; i < 30; ++i) t.requests.push_back({i < 10 ? i * 6.0 : 60 + i * 4.0, 100, 10});
  absl::StatusOr<TrafficShape> shape = ShapeOfTrace(t);
  REQUIRE(shape.ok());
  REQUIRE(shape->burst.size() == 3);
  double sum = 0;
  for (double b : shape->burst) sum += b;
  CHECK(sum == Approx(3));
  CHECK(shape->lengths.size() == 30);
  t.duration_s = 30;
  CHECK_FALSE(ShapeOfTrace(t).ok());  // under two minutes
}

}  // namespace
}  // namespace exa::sim
