// Releases: the rollout state machine — stages, observation windows, automatic rollback on a
// regression, the availability floor, operator commands, the state's round trip — and the
// rollout fields of the spec with their bad input.
#include <catch2/catch.hpp>

#include "scheduler/rollout.h"

namespace exa::scheduler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

InferenceReplicaSpec Spec(int replicas, std::string version = "v1") {
  InferenceReplicaSpec s;
  s.name = "llama";
  s.model = "llama-13b";
  s.version = std::move(version);
  s.replicas = replicas;
  s.rollout.observe = absl::Minutes(5);
  s.rollout.min_samples = 3;
  s.rollout.keep_rollback_target = 2;
  return s;
}

// Obedient nodes: every desired replica is ready at the next step; each ready replica reports
// its version's latency every 10 s.
struct World {
  InferenceReplicaSpec spec;
  RolloutState state;
  std::map<std::string, int> ready;
  MetricWindow metrics;
  std::map<std::string, double> latency{{"v1", 1.0}, {"v2", 1.0}};
  int min_ready = 1 << 30;
  int max_new = 0;
  std::vector<std::string> events;
  bool alerted = false;

  explicit World(int n) : spec(Spec(n)) {
    ready["v1"] = n;
    state.stable_version = "v1";  // the spec ran v1 before
  }

  void Run(absl::Time from, absl::Duration length) {
    for (absl::Time t = from; t < from + length; t += absl::Seconds(10)) {
      for (const auto& [v, count] : ready) {
        for (int i = 0; i < std::min(count, 50); ++i) {
          metrics.Add(ReplicaSample{t, v, latency[v] * (1 + 0.01 * (i % 5)), 0.0, -1, -1});
        }
      }
      RolloutStep step = AdvanceRollout(t, spec, state, ready, metrics);
      state = step.state;
      alerted |= step.rolled_back_now;
      for (auto& e : step.events) events.push_back(e);
      // The old track shrinks at once; a new one is ready at the next step.
      std::map<std::string, int> next;
      for (const auto& [v, count] : step.tracks) {
        int have = ready.count(v) ? ready[v] : 0;
        next[v] = count;
        if (count > have) next[v] = count;
      }
      ready = next;
      int total = 0;
      for (const auto& [v, c] : ready) total += c;
      min_ready = std::min(min_ready, total);
      if (ready.count("v2")) max_new = std::max(max_new, ready["v2"]);
    }
  }
};

TEST_CASE("Stage counts: defaults clamped to the replicas; written stages resolved") {
  CHECK(RolloutStageCounts(Spec(3072)) == std::vector<int>{12, 308, 1536, 3072});
  CHECK(RolloutStageCounts(Spec(3)) == std::vector<int>{3});
  InferenceReplicaSpec s = Spec(100);
  s.rollout.stages = {{5, 0}, {0, 50}, {0, 100}};
  CHECK(RolloutStageCounts(s) == std::vector<int>{5, 50, 100});
  CHECK(MaxUnavailable(Spec(3072)) == 30);
  CHECK(MaxUnavailable(Spec(3)) == 1);
}

TEST_CASE("A 30 % slower version is rolled back at stage 1, with the metric and both values") {
  World w(100);
  w.spec.rollout.stages = {{5, 0}, {0, 50}, {0, 100}};
  w.latency["v2"] = 1.3;
  w.Run(kT0, absl::Minutes(1));
  CHECK(w.state.phase == RolloutPhase::kIdle);
  w.spec.version = "v2";
  w.Run(kT0 + absl::Minutes(1), absl::Minutes(20));
  CHECK(w.state.phase == RolloutPhase::kRolledBack);
  CHECK(w.state.stable_version == "v1");
  CHECK(w.state.failed_version == "v2");
  CHECK(w.state.failure.find("p99Latency") != std::string::npos);
  INFO(w.state.failure);
  CHECK(w.state.failure.find(
            "p99Latency 1326 ms on v2 vs 1020 ms on v1 (threshold +10%) over the 5m window") !=
        std::string::npos);
  CHECK(w.alerted);
  CHECK(w.max_new <= 5);  // never more than stage 1's replicas of the bad version
  CHECK(w.ready["v2"] == 0);
  CHECK(w.ready["v1"] == 100);
  CHECK(w.min_ready >= 99);
  REQUIRE(!w.state.decisions.empty());
  CHECK(w.state.decisions.back().decision == "rolled back");
  // Not retried while the spec still names it.
  w.Run(kT0 + absl::Minutes(30), absl::Minutes(10));
  CHECK(w.state.phase == RolloutPhase::kRolledBack);
  CHECK(w.ready.count("v2") == 0);
}

TEST_CASE("A good version is promoted through every stage, availability at the floor or above") {
  World w(100);
  w.spec.rollout.stages = {{5, 0}, {0, 50}, {0, 100}};
  w.latency["v2"] = 1.02;  // within the 10 % threshold
  w.spec.version = "v2";
  w.Run(kT0, absl::Minutes(60));
  CHECK(w.state.phase == RolloutPhase::kSucceeded);
  CHECK(w.state.stable_version == "v2");
  CHECK(w.ready["v2"] == 100);
  CHECK(w.ready["v1"] == 0);
  CHECK(w.state.decisions.size() == 3);
  for (const StageDecision& d : w.state.decisions) CHECK(d.decision == "promoted");
  CHECK(w.min_ready >= 99);  // maxUnavailable = 1 of 100
  CHECK_FALSE(w.alerted);
}

TEST_CASE("The last stage keeps the rollback target until it passes") {
  World w(10);
  w.spec.rollout.stages = {{2, 0}, {0, 100}};
  w.spec.version = "v2";
  RolloutStep step;
  // Stage 1 reached and observed.
  w.Run(kT0, absl::Minutes(6));
  REQUIRE(w.state.stage == 1);
  step = AdvanceRollout(kT0 + absl::Minutes(7), w.spec, w.state, w.ready, w.metrics);
  CHECK(step.tracks["v2"] == 8);
  CHECK(step.tracks["v1"] == 2);
}

TEST_CASE("Too few samples: the window extends instead of judging") {
  World w(10);
  w.spec.rollout.min_samples = 1000;
  w.spec.version = "v2";
  w.Run(kT0, absl::Minutes(30));
  CHECK(w.state.phase == RolloutPhase::kObserving);
  CHECK(w.state.stage == 0);
}

TEST_CASE("Operator commands: pause holds, promote skips the wait, rollback restores") {
  World w(100);
  w.spec.rollout.stages = {{5, 0}, {0, 50}, {0, 100}};
  MetricWindow none;
  CHECK(ApplyCommand(kT0, w.spec, w.state, RolloutCommand::kPause, none).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  w.spec.version = "v2";
  w.Run(kT0, absl::Seconds(30));
  REQUIRE(w.state.phase == RolloutPhase::kObserving);
  auto paused = ApplyCommand(kT0, w.spec, w.state, RolloutCommand::kPause, w.metrics);
  REQUIRE(paused.ok());
  w.state = *paused;
  w.Run(kT0 + absl::Minutes(1), absl::Minutes(30));
  CHECK(w.state.stage == 0);  // no decision while paused
  auto promoted = ApplyCommand(kT0, w.spec, w.state, RolloutCommand::kPromote, w.metrics);
  REQUIRE(promoted.ok());
  CHECK(promoted->stage == 1);
  CHECK(promoted->decisions.back().decision == "promoted by operator");
  auto back = ApplyCommand(kT0, w.spec, *promoted, RolloutCommand::kRollback, w.metrics);
  REQUIRE(back.ok());
  CHECK(back->phase == RolloutPhase::kRolledBack);
  CHECK(back->failed_version == "v2");
  // v2 is retired only as v1 becomes ready: 95 + 1 unavailable leaves 4 of its 5 running.
  CHECK(AdvanceRollout(kT0, w.spec, *back, w.ready, w.metrics).tracks ==
        std::map<std::string, int>{{"v1", 100}, {"v2", 4}});
  std::map<std::string, int> recovered = {{"v1", 100}, {"v2", 4}};
  CHECK(AdvanceRollout(kT0, w.spec, *back, recovered, w.metrics).tracks ==
        std::map<std::string, int>{{"v1", 100}});
  CHECK_FALSE(ParseRolloutCommand("restart").ok());
}

TEST_CASE("The spec returning to the stable version rolls back") {
  World w(10);
  w.spec.version = "v2";
  w.Run(kT0, absl::Seconds(30));
  REQUIRE(w.state.target_version == "v2");
  w.spec.version = "v1";
  w.Run(kT0 + absl::Minutes(1), absl::Seconds(20));
  CHECK(w.state.phase == RolloutPhase::kRolledBack);
  CHECK(w.ready["v1"] == 10);
  // Asking for v2 again after the spec named v1 is a new rollout, not the rolled-back one
  // silently ignored (it once stayed "rolled-back" with the spec at v2 and only v1 running).
  CHECK(w.state.failed_version.empty());
  w.spec.version = "v2";
  w.Run(kT0 + absl::Minutes(2), absl::Seconds(30));
  CHECK(w.state.target_version == "v2");
  CHECK((w.state.phase == RolloutPhase::kProgressing || w.state.phase == RolloutPhase::kObserving));
  CHECK(w.ready["v2"] > 0);
}

TEST_CASE("A last stage with no old replica left is judged against the last stage's old figures") {
  World w(2);
  w.spec.rollout.stages = {{1, 0}, {0, 100}};
  w.spec.rollout.keep_rollback_target = 0;  // stage 2 runs v2 only
  w.spec.version = "v2";
  w.Run(kT0, absl::Minutes(30));  // it once waited for old samples for ever at stage 2
  CHECK(w.state.phase == RolloutPhase::kSucceeded);
  CHECK(w.state.stable_version == "v2");
  CHECK(w.ready["v2"] == 2);
  REQUIRE(w.state.decisions.size() == 2);
  CHECK(w.state.decisions[1].metrics.front().old_samples > 0);  // stage 1's v1 figures

  // Stage 2 is judged by them: a v3 that is fine at stage 1 and slow once alone is caught.
  World slow(2);
  slow.spec.rollout.stages = {{1, 0}, {0, 100}};
  slow.spec.rollout.keep_rollback_target = 0;
  slow.spec.version = "v2";
  slow.Run(kT0, absl::Minutes(7));
  REQUIRE(slow.state.stage == 1);
  slow.latency["v2"] = 1.5;
  slow.Run(kT0 + absl::Minutes(7), absl::Minutes(20));
  CHECK(slow.state.phase == RolloutPhase::kRolledBack);
  CHECK(slow.ready["v1"] == 2);
}

TEST_CASE("A rollout whose old version had no replicas promotes on the new one's figures") {
  World w(2);
  w.ready.clear();  // replicas: 0 before
  w.spec.rollout.stages = {{0, 100}};
  w.spec.rollout.keep_rollback_target = 0;
  w.spec.version = "v2";
  w.Run(kT0, absl::Minutes(30));
  CHECK(w.state.phase == RolloutPhase::kSucceeded);
  REQUIRE(w.state.decisions.size() == 1);
  CHECK(w.state.decisions[0].decision == "promoted (no old replicas to compare with)");
}

TEST_CASE("The rollout state survives its JSON round trip") {
  World w(100);
  w.spec.rollout.stages = {{5, 0}, {0, 100}};
  w.spec.version = "v2";
  w.Run(kT0, absl::Minutes(7));
  REQUIRE(!w.state.decisions.empty());
  auto back = RolloutStateFromJson(RolloutStateToJson(w.state));
  REQUIRE(back.ok());
  CHECK(*back == w.state);
  CHECK_FALSE(RolloutStateFromJson("[1,2]").ok());
  CHECK_FALSE(RolloutStateFromJson("{\"stage\": \"x\"}").ok());
}

TEST_CASE("Rollout fields: parsed, written back, and bad input named") {
  const std::string head =
      "apiVersion: exaserve.io/v1\nkind: InferenceReplica\nmetadata: {name: m}\n"
      "spec:\n  model: llama-13b\n  replicas: 100\n";
  auto ok = ParseSpecs(head +
                           "  rollout: {stages: [5, 50%, 100%], observe: 10m, "
                           "regressionThreshold: 5%, metrics: [p99Latency, ttft], "
                           "keepRollbackTarget: 3, minSamples: 20}\n  maxUnavailable: 2\n",
                       "s.yaml");
  REQUIRE(ok.ok());
  const InferenceReplicaSpec& s = ok->front();
  CHECK(RolloutStageCounts(s) == std::vector<int>{5, 50, 100});
  CHECK(s.rollout.observe == absl::Minutes(10));
  CHECK(s.rollout.regression_threshold == Approx(0.05));
  CHECK(s.rollout.metrics == std::vector<std::string>{"p99Latency", "ttft"});
  CHECK(MaxUnavailable(s) == 2);
  auto again = ParseSpecs(SpecToYaml(s), "round-trip");
  REQUIRE(again.ok());
  CHECK(again->front() == s);

  auto bad = [&](const std::string& rollout, const std::string& expect) {
    auto r = ParseSpecs(head + "  rollout: " + rollout + "\n", "s.yaml");
    REQUIRE_FALSE(r.ok());
    INFO(r.status().message());
    CHECK(std::string(r.status().message()).find(expect) != std::string::npos);
  };
  bad("{stages: [50%, 10%, 100%]}", "spec.rollout.stages[1] 10% is 10 of 100 replicas");
  bad("{stages: [5, 50%]}", "it must be 100%");
  bad("{stages: [0%, 100%]}", "must be in (0%, 100%]");
  bad("{stages: [150%]}", "must be in (0%, 100%]");
  bad("{regressionThreshold: 0}", "must be above 0%");
  bad("{regressionThreshold: -5%}", "must be above 0%");
  bad("{metrics: [latency]}", "expected p99Latency, errorRate, memory or ttft");
  bad("{observe: 0s}", "must be at least 1s");
  bad("{stagez: [1]}", "did you mean \"stages\"");
}

}  // namespace
}  // namespace exa::scheduler

namespace exa::scheduler {
namespace {

TEST_CASE("No samples at all (no traffic): not promoted, the window extends") {
  InferenceReplicaSpec spec = Spec(10, "v2");
  RolloutState state;
  state.stable_version = "v1";
  std::map<std::string, int> ready{{"v1", 10}};
  MetricWindow empty;
  RolloutStep step = AdvanceRollout(kT0, spec, state, ready, empty);
  ready = {{"v1", 9}, {"v2", step.tracks["v2"]}};
  step = AdvanceRollout(kT0 + absl::Seconds(1), spec, step.state, ready, empty);
  REQUIRE(step.state.phase == RolloutPhase::kObserving);
  step = AdvanceRollout(kT0 + absl::Hours(2), spec, step.state, ready, empty);
  CHECK(step.state.phase == RolloutPhase::kObserving);
  CHECK(step.state.decisions.empty());
}

}  // namespace
}  // namespace exa::scheduler
