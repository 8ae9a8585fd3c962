// The autoscaler's decisions: proportional to the load, fast up on a burst, slow and stable down,
// within the rate limits and floors.
#include "scheduler/autoscaler.h"

#include <catch2/catch.hpp>

#include "scheduler/spec.h"

namespace exa::scheduler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

InferenceReplicaSpec Spec() {
  InferenceReplicaSpec s;
  s.name = "chat";
  s.model = "m";
  s.replicas = 4;
  s.concurrency = 8;
  s.autoscaling.enabled = true;
  s.autoscaling.min_replicas = 2;
  s.autoscaling.max_replicas = 100;
  s.autoscaling.metric = "pendingTokensPerReplica";
  s.autoscaling.target = 1000;
  return s;
}

// Runs `seconds` steps of one second at a constant load per replica, following its own decisions
// with replicas ready at once; returns the last decision.
AutoscaleDecision Run(Autoscaler& as, const InferenceReplicaSpec& spec, absl::Time& now,
                      int& current, double total_tokens, int seconds, int* reversals = nullptr) {
  AutoscaleDecision d;
  int last_direction = 0;
  for (int i = 0; i < seconds; ++i) {
    now += absl::Seconds(1);
    d = as.Step(spec, AutoscaleInput{now, current, current, total_tokens / current, 0, false});
    if (d.direction != 0 && reversals != nullptr && last_direction != 0 &&
        d.direction != last_direction) {
      ++*reversals;
    }
    if (d.direction != 0) last_direction = d.direction;
    current = d.desired;
  }
  return d;
}

TEST_CASE("The count follows the load proportionally, within minReplicas and maxReplicas") {
  const InferenceReplicaSpec spec = Spec();
  Autoscaler as;
  absl::Time now = kT0;
  int current = 4;
  Run(as, spec, now, current, 4 * 1000, 120);
  CHECK(current == 4);  // at the target: no change
  Run(as, spec, now, current, 10 * 1000, 300);
  CHECK(current == 10);
  Run(as, spec, now, current, 1000 * 1000, 600);
  CHECK(current == 100);  // maxReplicas
  Run(as, spec, now, current, 0, 1800);
  CHECK(current == 2);  // minReplicas
}

TEST_CASE("A burst scales up at once; the way down waits out the stabilization window") {
  InferenceReplicaSpec spec = Spec();
  spec.autoscaling.scale_down_stabilization = absl::Minutes(5);
  Autoscaler as;
  absl::Time now = kT0;
  int current = 4;
  Run(as, spec, now, current, 4 * 1000, 120);
  // Four times the load: the 6 s panic window sees it within seconds.
  Run(as, spec, now, current, 16 * 1000, 8);
  CHECK(current >= 8);
  Run(as, spec, now, current, 16 * 1000, 120);
  CHECK(current == 16);
  // The load drops back: nothing moves for the scale-down window, then it goes down.
  Run(as, spec, now, current, 4 * 1000, 200);
  CHECK(current == 16);
  Run(as, spec, now, current, 4 * 1000, 600);
  CHECK(current == 4);
}

TEST_CASE("Rate limits: at most double (or +4) and at most half per minute") {
  InferenceReplicaSpec spec = Spec();
  spec.autoscaling.scale_down_stabilization = absl::ZeroDuration();
  Autoscaler as;
  absl::Time now = kT0;
  int current = 4;
  Run(as, spec, now, current, 4 * 1000, 60);
  Run(as, spec, now, current, 64 * 1000, 30);
  CHECK(current <= 8);
  Run(as, spec, now, current, 64 * 1000, 300);
  CHECK(current == 64);
  Run(as, spec, now, current, 2 * 1000, 50);
  CHECK(current >= 32);
}

TEST_CASE("A noisy load near the target does not flap") {
  const InferenceReplicaSpec spec = Spec();
  Autoscaler as;
  absl::Time now = kT0;
  int current = 10;
  int reversals = 0;
  for (int minute = 0; minute < 60; ++minute) {
    const double load = (minute % 2 == 0 ? 10.5 : 9.3) * 1000;  // ±7 %
    Run(as, spec, now, current, load, 60, &reversals);
  }
  CHECK(current == 10);
  CHECK(reversals == 0);
}

// Steps of one second at `total_tokens` until the count moves (at most an hour).
void UntilMoved(Autoscaler& as, const InferenceReplicaSpec& spec, absl::Time& now, int& current,
                double total_tokens) {
  const int before = current;
  for (int i = 0; i < 3600 && current == before; ++i) {
    Run(as, spec, now, current, total_tokens, 1);
  }
}

TEST_CASE("At most one reversal per stabilization window, unless a burst panics") {
  InferenceReplicaSpec spec = Spec();
  spec.autoscaling.scale_down_stabilization = absl::Minutes(5);
  for (bool burst : {false, true}) {
    INFO((burst ? "2.5 times the load: panic" : "a third more"));
    Autoscaler as;
    absl::Time now = kT0;
    int current = 4;
    Run(as, spec, now, current, 4 * 1000, 120);
    Run(as, spec, now, current, 10 * 1000, 300);
    REQUIRE(current == 10);  // up
    UntilMoved(as, spec, now, current, 6 * 1000);
    const int down = current;
    REQUIRE(down < 10);  // down, after its window: a reversal
    // The load rises again right after. A third more waits out a window from the reversal
    // (the second the move down took to register included); 2.5 times goes at once.
    const double load = down * (burst ? 2.5 : 4.0 / 3) * 1000;
    int low = down;  // it may go on down first: no reversal in that
    int waited = 0;
    for (; current <= low && waited < 3600; ++waited) {
      low = current;
      Run(as, spec, now, current, load, 1);
    }
    CHECK(current > low);
    if (burst) {
      CHECK(waited <= 8);
    } else {
      CHECK(waited >= 295);
      CHECK(waited <= 301);
    }
  }
}

TEST_CASE("No scale-down below the slots in flight, nor while a rollout observes") {
  InferenceReplicaSpec spec = Spec();
  spec.autoscaling.scale_down_stabilization = absl::ZeroDuration();
  Autoscaler as;
  absl::Time now = kT0;
  AutoscaleDecision d;
  for (int i = 0; i < 120; ++i) {
    now += absl::Seconds(1);
    // Idle by tokens, but 80 sequences in flight need 10 replicas of 8 slots.
    d = as.Step(spec, AutoscaleInput{now, 20, 20, 0, 80, false});
  }
  CHECK(d.desired == 10);
  Autoscaler held;
  for (int i = 0; i < 120; ++i) {
    now += absl::Seconds(1);
    d = held.Step(spec, AutoscaleInput{now, 20, 20, 0, 0, /*hold_down=*/true});
  }
  CHECK(d.desired == 20);
  CHECK(d.direction == 0);
}

TEST_CASE("Without a reported value the count holds, clamped to the bounds") {
  const InferenceReplicaSpec spec = Spec();
  Autoscaler as;
  AutoscaleDecision d = as.Step(spec, AutoscaleInput{kT0, 1, 0, -1, 0, false});
  CHECK(d.desired == 2);
  CHECK(d.direction == 1);
  d = as.Step(spec, AutoscaleInput{kT0 + absl::Seconds(1), 7, 7, -1, 0, false});
  CHECK(d.desired == 7);
  CHECK(d.direction == 0);
}

TEST_CASE(
    "A rising load names the replicas it is likely to want next; a flat or falling one none") {
  const InferenceReplicaSpec spec = Spec();
  Autoscaler as;
  absl::Time now = kT0;
  int current = 4;
  CHECK(Run(as, spec, now, current, 4 * 1000, 120).ahead == 0);  // flat at the target
  // A ramp: 4 000 tokens in flight growing by 100 a second. The 60 s mean lags the 6 s one.
  int most_ahead = 0;
  for (int i = 1; i <= 60; ++i) {
    now += absl::Seconds(1);
    const double total = 4000 + 100.0 * i;
    AutoscaleDecision d = as.Step(spec, AutoscaleInput{now, current, current, total / current, 0});
    most_ahead = std::max(most_ahead, d.ahead);
    CHECK(d.desired + d.ahead <= spec.autoscaling.max_replicas);
    CHECK(d.ahead <= std::max(d.desired, 4));  // one doubling at most
    current = d.desired;
  }
  CHECK(most_ahead > 0);
  // Extrapolated, not invented: at 10 000 tokens, what the ramp reaches 30 s on (13 000) is at
  // most 13 replicas at the target of 1 000.
  CHECK(current + most_ahead <= 14);
  CHECK(Run(as, spec, now, current, 10 * 1000, 120).ahead == 0);  // flat again
  CHECK(Run(as, spec, now, current, 2 * 1000, 30).ahead == 0);    // falling
}

TEST_CASE("minReplicas 0: idle for the whole window goes to zero; waiting requests bring one") {
  InferenceReplicaSpec spec = Spec();
  spec.autoscaling.min_replicas = 0;
  spec.autoscaling.scale_down_stabilization = absl::Minutes(5);
  Autoscaler as;
  absl::Time now = kT0;
  int current = 3;
  Run(as, spec, now, current, 0, 4 * 60);
  CHECK(current >= 1);  // idle for less than the window: the last replica stays
  Run(as, spec, now, current, 0, 5 * 60);
  CHECK(current == 0);  // idle for the whole window: scaled to zero, past the rate limit

  // At zero nothing reports; the count holds until a gateway holds requests for the model.
  now += absl::Seconds(1);
  AutoscaleDecision d = as.Step(spec, AutoscaleInput{now, 0, 0, -1, 0, false});
  CHECK(d.desired == 0);
  now += absl::Seconds(1);
  d = as.Step(spec, AutoscaleInput{.now = now, .current = 0, .waiting = true});
  CHECK(d.desired == 1);
  CHECK(d.direction == 1);
  CHECK_THAT(d.reason, Catch::Contains("scale from zero"));
  // Started, not ready yet, requests still waiting: it stays at one.
  now += absl::Seconds(1);
  d = as.Step(spec, AutoscaleInput{.now = now, .current = 1, .waiting = true});
  CHECK(d.desired == 1);
  // Ready and idle with requests still waiting (they are being sent to it): not scaled down.
  for (int i = 0; i < 400; ++i) {
    now += absl::Seconds(1);
    d = as.Step(
        spec, AutoscaleInput{.now = now, .current = 1, .ready = 1, .value = 0, .waiting = i < 390});
  }
  CHECK(d.desired == 1);  // the window since the last waiting request has not passed
  Run(as, spec, now, current = 1, 0, 6 * 60);
  CHECK(current == 0);
}

TEST_CASE("A deployment with sequences in flight is not scaled to zero") {
  InferenceReplicaSpec spec = Spec();
  spec.autoscaling.min_replicas = 0;
  spec.autoscaling.scale_down_stabilization = absl::ZeroDuration();
  Autoscaler as;
  absl::Time now = kT0;
  AutoscaleDecision d;
  for (int i = 0; i < 120; ++i) {
    now += absl::Seconds(1);
    d = as.Step(spec,
                AutoscaleInput{.now = now, .current = 1, .ready = 1, .value = 0, .in_flight = 1});
  }
  CHECK(d.desired == 1);
}

}  // namespace
}  // namespace exa::scheduler
