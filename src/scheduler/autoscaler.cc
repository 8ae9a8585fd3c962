#include "scheduler/autoscaler.h"

#include <algorithm>
#include <cmath>

#include "common/strings.h"

namespace exa::scheduler {
namespace {

int Ceil(double implied) {
  return static_cast<int>(std::min<double>(std::ceil(implied - 1e-9), kMaxReplicas));
}

int Direction(int desired, int current) {
  return desired > current ? 1 : desired < current ? -1 : 0;
}

std::string ValueText(const AutoscalingSpec& a, double v) {
  if (a.metric == "pendingTokensPerReplica") return StrCat(std::lround(v), " tokens");
  return StrCat(std::lround(v * 1000), " ms");
}

}  // namespace

Autoscaler::Sample Autoscaler::Mean(absl::Time since) const {
  Sample mean{since, 0, 0};
  int n = 0;
  for (auto it = samples_.rbegin(); it != samples_.rend() && it->at >= since; ++it) {
    mean.value += it->value;
    mean.implied += it->implied;
    ++n;
  }
  if (n == 0) return Sample{since, -1, -1};
  mean.value /= n;
  mean.implied /= n;
  return mean;
}

// A scale-up takes the lowest count recommended over scaleUpStabilization, a scale-down the
// highest over scaleDownStabilization (with windows of 0, this step's recommendation).
int Autoscaler::Stabilize(const AutoscalingSpec& a, absl::Time now, int current, int recommended) {
  recommendations_.push_back({now, recommended});
  const absl::Duration keep = std::max(a.scale_up_stabilization, a.scale_down_stabilization);
  while (!recommendations_.empty() && recommendations_.front().at < now - keep) {
    recommendations_.pop_front();
  }
  int up = recommended, down = recommended;
  for (const Count& c : recommendations_) {
    if (c.at >= now - a.scale_up_stabilization) up = std::min(up, c.replicas);
    if (c.at >= now - a.scale_down_stabilization) down = std::max(down, c.replicas);
  }
  if (up > current) return up;
  if (down < current) return down;
  return current;
}

// Before this step's count joins counts_, whose last entry is the step before's.
void Autoscaler::NoteCount(absl::Time now, int current) {
  if (counts_.empty() || current == counts_.back().replicas) return;
  const int move = Direction(current, counts_.back().replicas);
  if (last_move_ != 0 && move != last_move_) last_reversal_ = now;
  last_move_ = move;
}

// At most one reversal per scale-down stabilization window: a move against the count's last one
// waits until a window has passed since the last reversal.
int Autoscaler::HoldReversal(const AutoscalingSpec& a, absl::Time now, int current,
                             int want) const {
  const bool reverses = last_move_ != 0 && Direction(want, current) == -last_move_;
  return reverses && now - last_reversal_ < a.scale_down_stabilization ? current : want;
}

// At most max(count × maxScaleUpRate, count + 4) and at least count × (1 - maxScaleDownRate),
// the count being the highest (lowest) in force over the last minute.
int Autoscaler::RateLimit(const AutoscalingSpec& a, absl::Time now, int current,
                          int desired) const {
  int low = current, high = current;
  for (const Count& c : counts_) {
    if (c.at < now - kRateWindow) continue;
    low = std::min(low, c.replicas);
    high = std::max(high, c.replicas);
  }
  const int up_limit =
      std::max(static_cast<int>(std::ceil(low * a.max_scale_up_rate - 1e-9)), low + 4);
  const int down_limit = static_cast<int>(std::ceil(high * (1 - a.max_scale_down_rate) - 1e-9));
  return std::clamp(desired, std::min(down_limit, current), std::max(up_limit, current));
}

AutoscaleDecision Autoscaler::Step(const InferenceReplicaSpec& spec, const AutoscaleInput& in) {
  const AutoscalingSpec& a = spec.autoscaling;
  AutoscaleDecision d;
  d.desired = std::clamp(in.current, a.min_replicas, a.max_replicas);
  first_step_ = std::min(first_step_, in.now);
  NoteCount(in.now, in.current);
  counts_.push_back({in.now, in.current});
  while (!counts_.empty() && counts_.front().at < in.now - kRateWindow) counts_.pop_front();
  // Each sample as the count that was right for it (ready × value / target): a window that spans
  // a change of count does not apply old per-replica values to the new count.
  if (in.value >= 0 && in.ready > 0) {
    samples_.push_back({in.now, in.value, in.ready * in.value / a.target});
  }
  while (!samples_.empty() && samples_.front().at < in.now - kStableWindow) samples_.pop_front();
  const Sample stable = Mean(in.now - kStableWindow);
  const Sample burst = Mean(in.now - kPanicWindow);
  if (in.waiting && d.desired == 0) {
    d.desired = std::min(1, a.max_replicas);
    d.direction = Direction(d.desired, in.current);
    d.reason = "requests are waiting at a gateway and no replica is running (scale from zero)";
    return d;
  }
  if (stable.value < 0 || in.ready == 0) {
    d.direction = Direction(d.desired, in.current);
    d.reason = StrCat("no ", a.metric, " reported by a ready replica; held within [",
                      a.min_replicas, ", ", a.max_replicas, "]");
    return d;
  }
  int want = std::abs(stable.implied / std::max(in.current, 1) - 1) <= kTolerance
                 ? in.current
                 : Ceil(stable.implied);
  const int burst_want = burst.value < 0 ? 0 : Ceil(burst.implied);
  if (burst_want >= 2 * in.ready) panic_until_ = in.now + kStableWindow;
  d.panic = in.now < panic_until_;
  if (d.panic) want = std::max({want, burst_want, in.current});  // never down while panicking
  if (in.waiting) want = std::max(want, 1);  // recorded: the idle window starts after the last
  want = Stabilize(a, in.now, in.current, want);
  if (!d.panic) want = HoldReversal(a, in.now, in.current, want);
  // Enough slots for what is in flight: a scale-down never strands running sequences.
  const int64_t needed = (in.in_flight + spec.concurrency - 1) / std::max(1, spec.concurrency);
  if (want < in.current) want = std::max<int64_t>(want, std::min<int64_t>(needed, in.current));
  if (want < in.current && in.hold_down) want = in.current;  // the comparison needs both sizes
  // Idle over the whole stabilization window (and this autoscaler has seen all of it): the last
  // replicas go without the rate limit's rounding holding one back.
  const bool idle = want == 0 && in.in_flight == 0 && !in.waiting &&
                    in.now - first_step_ >= a.scale_down_stabilization;
  if (!idle) want = std::max(RateLimit(a, in.now, in.current, want), in.waiting ? 1 : 0);
  d.desired = std::clamp(want, a.min_replicas, a.max_replicas);
  d.direction = Direction(d.desired, in.current);
  if (burst.value >= 0 && burst.implied > stable.implied * (1 + kTolerance)) {
    const int projected = Ceil(2 * burst.implied - stable.implied);
    d.ahead = std::clamp(projected - d.desired, 0,
                         std::min(a.max_replicas - d.desired, std::max(d.desired, 4)));
  }
  d.reason =
      StrCat(a.metric, " ", ValueText(a, stable.value), " over 60 s (",
             ValueText(a, burst.value < 0 ? stable.value : burst.value),
             " over 6 s) against a target of ", ValueText(a, a.target), " with ", in.ready,
             " ready and ", in.in_flight, " sequences in flight", d.panic ? "; panic: a burst" : "",
             in.hold_down && d.desired >= in.current ? "; a rollout is observing" : "",
             idle && d.desired == 0 ? "; idle: scaled to zero" : "",
             d.ahead > 0 ? StrCat("; rising: weights pre-staged for ", d.ahead, " more") : "");
  return d;
}

}  // namespace exa::scheduler
