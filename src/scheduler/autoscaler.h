// The replica count of an autoscaled deployment (spec.autoscaling), decided from the load its
// replicas report (docs/architecture.md#autoscaling). Proportional like Kubernetes' HPA and
// Knative's KPA: desired = ceil(ready × value / target), averaged over a 60 s
// stable window; a 6 s panic window reacts to bursts (twice the ready count wanted: scale up at
// once, and no scale-down for a stable window after); stabilization windows (a scale-up takes the
// lowest count recommended over scaleUpStabilization, a scale-down the highest over
// scaleDownStabilization), at most one reversal of the count's direction per
// scaleDownStabilization window unless a burst panics, rate limits against the count of a minute
// ago, and floors: never below minReplicas or below the slots the sequences in flight need.
//
// Scale to zero (minReplicas 0): a deployment goes to 0 only when every recommendation over
// scaleDownStabilization was 0 with nothing in flight (idle for the whole window; the rate limit
// does not hold the last replica). At 0 nothing reports load, so it comes back on demand alone:
// requests a gateway holds for the model (`waiting`) start one replica at once, and keep at
// least one while they wait.
//
// A rising trend (the panic window's mean above the stable window's) reports the replicas it is
// likely to want next (AutoscaleDecision::ahead), so that their nodes pre-stage the weights
// before the count moves.
//
// Every scheduler runs one Autoscaler per autoscaled deployment each control step, so that a new
// Raft leader decides with windows already full; only the leader's decisions are stored.
//
// Thread safety: none; one owner (the control loop).
#pragma once

#include <deque>
#include <string>

#include "absl/time/time.h"
#include "scheduler/spec.h"

namespace exa::scheduler {

// What the autoscaler reads of one deployment in a step.
struct AutoscaleInput {
  absl::Time now;
  int current = 0;        // the count in force: the stored decision, else spec.replicas
  int ready = 0;          // ready replicas of every version
  double value = -1;      // the metric (spec.h kAutoscalingMetrics); below 0: none reported
  int64_t in_flight = 0;  // sequences running or waiting on its replicas
  // A rollout observation window is open: a scale-down waits for it to close
  // (docs/architecture.md#autoscaling).
  bool hold_down = false;
  // A gateway holds requests for this deployment's model with no replica to serve them
  // (docs/architecture.md#autoscaling): never fewer than one.
  bool waiting = false;
};

struct AutoscaleDecision {
  int desired = 0;
  int direction = 0;  // +1 up, -1 down, 0 unchanged
  bool panic = false;
  // The trend rises (the 6 s mean above the 60 s mean by more than the tolerance): replicas
  // beyond `desired` it is likely to want next, the 6 s mean extrapolated one step further,
  // within maxReplicas and one doubling. Their nodes pre-stage the weights.
  int ahead = 0;
  std::string reason;  // its inputs and why, for the event and the log line
};

class Autoscaler {
 public:
  static constexpr absl::Duration kStableWindow = absl::Seconds(60);
  static constexpr absl::Duration kPanicWindow = absl::Seconds(6);
  static constexpr absl::Duration kRateWindow = absl::Minutes(1);
  static constexpr double kTolerance = 0.10;  // |value / target - 1| within: no change

  AutoscaleDecision Step(const InferenceReplicaSpec& spec, const AutoscaleInput& in);

 private:
  struct Sample {
    absl::Time at;
    double value;
    double implied;  // ready × value / target
  };
  struct Count {
    absl::Time at;
    int replicas;
  };
  Sample Mean(absl::Time since) const;  // value -1: none
  int Stabilize(const AutoscalingSpec& a, absl::Time now, int current, int recommended);
  int RateLimit(const AutoscalingSpec& a, absl::Time now, int current, int desired) const;
  void NoteCount(absl::Time now, int current);  // the count in force this step
  int HoldReversal(const AutoscalingSpec& a, absl::Time now, int current, int want) const;

  std::deque<Sample> samples_;         // the stable window
  std::deque<Count> recommendations_;  // the longer stabilization window
  std::deque<Count> counts_;           // counts in force over the rate window
  // The direction the count in force last moved, and when it last reversed (moved against the
  // move before): seen by every scheduler alike, leader or not.
  int last_move_ = 0;
  absl::Time last_reversal_ = absl::InfinitePast();
  absl::Time panic_until_ = absl::InfinitePast();
  absl::Time first_step_ = absl::InfiniteFuture();
};

}  // namespace exa::scheduler
