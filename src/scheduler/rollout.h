// Releases: the rollout state machine, pure. A deployment runs its replicas as one
// track per version ("<name>@<version>", the reconciler's deployment names). Changing the spec's
// version starts a rollout from the stable version to the new one, stage by stage
// (RolloutStageCounts: by default 12 replicas, 10 %, 50 %, 100 %):
//   - progressing: the new track grows to the stage's count while the old one shrinks only as new
//     replicas become ready, never more than MaxUnavailable ahead of them — the deployment keeps
//     replicas − maxUnavailable ready, and old replicas free the memory new ones start in
//     (docs/architecture.md#orchestration: new replicas start where memory is free, old ones stop
//     after);
//   - observing: once the stage's new replicas are ready, for rollout.observe; then each metric
//     of rollout.metrics is compared between the versions over that window (the median of the
//     per-replica samples, at least rollout.minSamples each, else the window extends). New worse
//     than old by more than rollout.regressionThreshold → rolled back: the new track goes to 0,
//     the old one back to all replicas, with the metric, both values and the window recorded and
//     a P1 alert raised. Otherwise the next stage; after the last, the new version is stable;
//   - the last stage keeps rollout.keepRollbackTarget old replicas (the rollback target) until it
//     passes, so a late regression still has somewhere to go back to.
// After a rollout ends either way, the version left behind is retired at the same pace: its ready
// replicas stop only while the stable version keeps replicas − maxUnavailable ready, so neither
// a rollback nor the final switch dips below the floor.
// A rolled-back version is not retried while the spec still names it; once the spec names the
// stable version (or another), setting it again starts a new rollout. Operator commands
// (pause, resume, promote, rollback) are applied by ApplyCommand. The state is a value the
// scheduler keeps in the spec store, so a new reconciler continues where the last one stopped.
//
// Thread safety: pure functions and value types.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "scheduler/spec.h"

namespace exa::scheduler {

enum class RolloutPhase : uint8_t { kIdle, kProgressing, kObserving, kSucceeded, kRolledBack };
std::string_view RolloutPhaseName(RolloutPhase phase);

// "llama@v2": the reconciler's deployment for one version of a spec.
std::string TrackName(std::string_view deployment, std::string_view version);
// The spec and the version of a track ("llama@v2" → "llama", "v2"); a name without '@' is all
// spec, no version.
std::string_view SpecOfTrack(std::string_view track);
std::string_view VersionOfTrack(std::string_view track);

struct MetricComparison {
  std::string metric;
  double old_value = 0, new_value = 0;
  int old_samples = 0, new_samples = 0;
  bool judged = false;  // both had enough samples
  bool regressed = false;
};

struct StageDecision {
  int stage = 0;         // 0-based
  int replicas = 0;      // new-version replicas at this stage
  std::string decision;  // promoted, promoted by operator, rolled back, rolled back by operator
  absl::Time window_start = absl::InfinitePast();
  absl::Time at = absl::InfinitePast();
  std::vector<MetricComparison> metrics;
};

struct RolloutState {
  std::string stable_version;  // what runs outside a rollout
  std::string target_version;  // the version being rolled out; empty when none
  std::string failed_version;  // the last version rolled back
  // The version a finished rollout moved away from (the old stable after a success, the new one
  // after a rollback): its replicas stop only as the stable ones become ready.
  std::string previous_version;
  RolloutPhase phase = RolloutPhase::kIdle;
  int stage = 0;
  bool paused = false;
  absl::Time started = absl::InfinitePast();
  absl::Time window_start = absl::InfinitePast();  // the current stage's observation
  absl::Time finished = absl::InfinitePast();
  std::string failure;  // why it was rolled back
  std::vector<StageDecision> decisions;
  uint64_t last_command = 0;  // the last operator command applied
  bool operator==(const RolloutState& o) const;
};

std::string RolloutStateToJson(const RolloutState& state);
absl::StatusOr<RolloutState> RolloutStateFromJson(std::string_view json);

// One ready replica's figures at one moment; a negative value is "not measured".
struct ReplicaSample {
  absl::Time at;
  std::string version;
  double p99_latency_s = -1;
  double error_rate = -1;
  double memory_bytes = -1;
  double ttft_s = -1;
};

// Samples of the recent past, bounded in count and age.
class MetricWindow {
 public:
  explicit MetricWindow(size_t max_samples = 200'000, absl::Duration max_age = absl::Hours(3))
      : max_samples_(max_samples), max_age_(max_age) {}
  void Add(const ReplicaSample& sample);
  // Median of `metric` for `version` over [from, to] and how many samples it had.
  std::pair<double, int> Summarize(std::string_view version, std::string_view metric,
                                   absl::Time from, absl::Time to) const;
  size_t size() const { return samples_.size(); }

 private:
  size_t max_samples_;
  absl::Duration max_age_;
  std::deque<ReplicaSample> samples_;  // in time order
};

struct RolloutStep {
  RolloutState state;
  std::map<std::string, int> tracks;  // version → desired replicas
  std::vector<std::string> events;
  bool rolled_back_now = false;  // raise the P1 alert
};

// One step: the spec, the state from the store, ready replicas per version and the metrics.
RolloutStep AdvanceRollout(absl::Time now, const InferenceReplicaSpec& spec,
                           const RolloutState& state, const std::map<std::string, int>& ready,
                           const MetricWindow& metrics);

enum class RolloutCommand : uint8_t { kPause, kResume, kPromote, kRollback };
absl::StatusOr<RolloutCommand> ParseRolloutCommand(std::string_view name);
std::string_view RolloutCommandName(RolloutCommand command);

// Whether `spec` may be applied while `state` holds: FAILED_PRECONDITION when a rollout is in
// progress and the spec names neither its stable nor its target version (refused, not queued:
// the operator decides what happens to the running rollout).
absl::Status CheckApplyDuringRollout(const InferenceReplicaSpec& spec, const RolloutState& state);

// FAILED_PRECONDITION when there is no rollout to act on (the message says what the state is).
absl::StatusOr<RolloutState> ApplyCommand(absl::Time now, const InferenceReplicaSpec& spec,
                                          RolloutState state, RolloutCommand command,
                                          const MetricWindow& metrics);

// The comparison of every metric over the current window so far (for `rollout status`).
std::vector<MetricComparison> CompareNow(absl::Time now, const InferenceReplicaSpec& spec,
                                         const RolloutState& state, const MetricWindow& metrics);

}  // namespace exa::scheduler
