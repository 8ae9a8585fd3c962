#include "scheduler/rollout.h"

#include <algorithm>
#include <cmath>

#include "common/strings.h"
#include "common/units.h"
#include "nlohmann/json.hpp"

namespace exa::scheduler {
namespace {

using nlohmann::json;

// Error rates near zero: a new version is judged worse only when it is also this much worse in
// absolute terms (0.1 % of requests), so 0 → 0.0001 is not a regression.
constexpr double kErrorRateFloor = 0.001;

int64_t Ms(absl::Time t) { return t == absl::InfinitePast() ? 0 : absl::ToUnixMillis(t); }
absl::Time FromMs(int64_t ms) { return ms == 0 ? absl::InfinitePast() : absl::FromUnixMillis(ms); }

double Metric(const ReplicaSample& s, std::string_view metric) {
  if (metric == "p99Latency") return s.p99_latency_s;
  if (metric == "errorRate") return s.error_rate;
  if (metric == "memory") return s.memory_bytes;
  if (metric == "ttft") return s.ttft_s;
  return -1;
}

std::string Format(std::string_view metric, double v) {
  if (metric == "memory") return BytesToString(static_cast<uint64_t>(std::max(0.0, v)));
  if (metric == "errorRate") return StrCat(std::round(v * 10000) / 100, "%");
  return StrCat(std::round(v * 1e4) / 10, " ms");  // seconds → ms with 0.1 ms
}

// The new-version replicas of stage `stage` while it is being observed; the last stage keeps the
// rollback target on the old version (while it still grows past the stage before).
int NewTarget(const InferenceReplicaSpec& spec, const std::vector<int>& counts, int stage) {
  const int last = static_cast<int>(counts.size()) - 1;
  if (stage < last) return counts[stage];
  const int before = stage > 0 ? counts[stage - 1] : 0;
  const int keep = std::min(spec.rollout.keep_rollback_target, spec.replicas - before - 1);
  return spec.replicas - std::max(0, keep);
}

// `old_gone`: no replica of the old version is ready, so its samples will not grow.
std::vector<MetricComparison> Compare(const InferenceReplicaSpec& spec, const RolloutState& st,
                                      const MetricWindow& metrics, absl::Time from, absl::Time to,
                                      bool old_gone = false) {
  std::vector<MetricComparison> out;
  for (const std::string& m : spec.rollout.metrics) {
    MetricComparison c;
    c.metric = m;
    std::tie(c.old_value, c.old_samples) = metrics.Summarize(st.stable_version, m, from, to);
    std::tie(c.new_value, c.new_samples) = metrics.Summarize(st.target_version, m, from, to);
    if (old_gone && c.old_samples < spec.rollout.min_samples) {
      // No old replica is left to sample (the last stage of a small deployment can hold none):
      // the old version's figures from the latest stage that judged this metric stand in.
      bool found = false;
      for (auto d = st.decisions.rbegin(); d != st.decisions.rend() && !found; ++d) {
        for (const MetricComparison& earlier : d->metrics) {
          if (earlier.metric == m && earlier.judged) {
            c.old_value = earlier.old_value;
            c.old_samples = earlier.old_samples;
            found = true;
            break;
          }
        }
      }
    }
    c.judged =
        c.old_samples >= spec.rollout.min_samples && c.new_samples >= spec.rollout.min_samples;
    if (c.judged) {
      double limit = c.old_value * (1 + spec.rollout.regression_threshold);
      if (m == "errorRate") limit += kErrorRateFloor;
      c.regressed = c.new_value > limit;
    }
    out.push_back(std::move(c));
  }
  return out;
}

void RollBack(absl::Time now, RolloutState& st, std::string why, RolloutStep* step) {
  st.failed_version = st.target_version;
  st.previous_version = st.target_version;
  st.failure = std::move(why);
  st.phase = RolloutPhase::kRolledBack;
  st.finished = now;
  st.paused = false;
  if (step) {
    step->events.push_back(StrCat("rollout to ", st.target_version, " rolled back to ",
                                  st.stable_version, ": ", st.failure));
    step->rolled_back_now = true;
  }
  st.target_version.clear();
}

void NextStage(absl::Time now, const InferenceReplicaSpec& spec, RolloutState& st,
               std::vector<MetricComparison> metrics, std::string decision, RolloutStep* step) {
  const std::vector<int> counts = RolloutStageCounts(spec);
  StageDecision d;
  d.stage = st.stage;
  d.replicas = NewTarget(spec, counts, std::min<int>(st.stage, counts.size() - 1));
  d.decision = std::move(decision);
  d.window_start = st.window_start;
  d.at = now;
  d.metrics = std::move(metrics);
  st.decisions.push_back(std::move(d));
  if (st.decisions.size() > 32) st.decisions.erase(st.decisions.begin());
  st.stage++;
  st.window_start = absl::InfinitePast();
  if (st.stage >= static_cast<int>(counts.size())) {
    if (step) {
      step->events.push_back(
          StrCat("rollout to ", st.target_version, " complete: ", st.target_version, " is stable"));
    }
    st.previous_version = st.stable_version;
    st.stable_version = st.target_version;
    st.target_version.clear();
    st.phase = RolloutPhase::kSucceeded;
    st.finished = now;
    return;
  }
  st.phase = RolloutPhase::kProgressing;
  if (step) {
    step->events.push_back(StrCat("rollout to ", st.target_version, ": stage ", st.stage + 1,
                                  " of ", counts.size(), " (", NewTarget(spec, counts, st.stage),
                                  " replicas)"));
  }
}

// Outside a rollout: every replica on the stable version, and the version left behind retired
// as the stable one becomes ready.
void SettledTracks(const InferenceReplicaSpec& spec, const RolloutState& st,
                   const std::map<std::string, int>& ready, RolloutStep& step) {
  const int n = spec.replicas;
  step.tracks[st.stable_version] = n;
  const std::string& prev = st.previous_version;
  if (prev.empty() || prev == st.stable_version) return;
  auto get = [&](const std::string& v) {
    auto it = ready.find(v);
    return it == ready.end() ? 0 : it->second;
  };
  const int keep =
      std::min(get(prev), n - std::min(n, get(st.stable_version) + MaxUnavailable(spec)));
  if (keep > 0) step.tracks[prev] = keep;
}

}  // namespace

bool RolloutState::operator==(const RolloutState& o) const {
  return RolloutStateToJson(*this) == RolloutStateToJson(o);
}

std::string_view RolloutPhaseName(RolloutPhase phase) {
  switch (phase) {
    case RolloutPhase::kIdle:
      return "idle";
    case RolloutPhase::kProgressing:
      return "progressing";
    case RolloutPhase::kObserving:
      return "observing";
    case RolloutPhase::kSucceeded:
      return "succeeded";
    case RolloutPhase::kRolledBack:
      return "rolled-back";
  }
  return "?";
}

std::string TrackName(std::string_view deployment, std::string_view version) {
  return StrCat(deployment, "@", version);
}

std::string_view SpecOfTrack(std::string_view track) { return track.substr(0, track.rfind('@')); }

std::string_view VersionOfTrack(std::string_view track) {
  const size_t at = track.rfind('@');
  return at == std::string_view::npos ? std::string_view() : track.substr(at + 1);
}

std::string RolloutStateToJson(const RolloutState& s) {
  json decisions = json::array();
  for (const StageDecision& d : s.decisions) {
    json metrics = json::array();
    for (const MetricComparison& m : d.metrics) {
      metrics.push_back({{"metric", m.metric},
                         {"old", m.old_value},
                         {"new", m.new_value},
                         {"old_samples", m.old_samples},
                         {"new_samples", m.new_samples},
                         {"judged", m.judged},
                         {"regressed", m.regressed}});
    }
    decisions.push_back({{"stage", d.stage},
                         {"replicas", d.replicas},
                         {"decision", d.decision},
                         {"window_start_ms", Ms(d.window_start)},
                         {"at_ms", Ms(d.at)},
                         {"metrics", metrics}});
  }
  json j = {{"stable", s.stable_version},
            {"target", s.target_version},
            {"failed", s.failed_version},
            {"previous", s.previous_version},
            {"phase", RolloutPhaseName(s.phase)},
            {"stage", s.stage},
            {"paused", s.paused},
            {"started_ms", Ms(s.started)},
            {"window_start_ms", Ms(s.window_start)},
            {"finished_ms", Ms(s.finished)},
            {"failure", s.failure},
            {"last_command", s.last_command},
            {"decisions", decisions}};
  return j.dump();
}

absl::StatusOr<RolloutState> RolloutStateFromJson(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return absl::DataLossError("rollout state: not a JSON object");
  try {
    RolloutState s;
    s.stable_version = j.value("stable", "");
    s.target_version = j.value("target", "");
    s.failed_version = j.value("failed", "");
    s.previous_version = j.value("previous", "");
    const std::string phase = j.value("phase", "idle");
    s.phase = RolloutPhase::kIdle;
    for (RolloutPhase p :
         {RolloutPhase::kIdle, RolloutPhase::kProgressing, RolloutPhase::kObserving,
          RolloutPhase::kSucceeded, RolloutPhase::kRolledBack}) {
      if (RolloutPhaseName(p) == phase) s.phase = p;
    }
    s.stage = j.value("stage", 0);
    s.paused = j.value("paused", false);
    s.started = FromMs(j.value("started_ms", int64_t{0}));
    s.window_start = FromMs(j.value("window_start_ms", int64_t{0}));
    s.finished = FromMs(j.value("finished_ms", int64_t{0}));
    s.failure = j.value("failure", "");
    s.last_command = j.value("last_command", uint64_t{0});
    if (j.contains("decisions") && j["decisions"].is_array()) {
      for (const json& d : j["decisions"]) {
        StageDecision sd;
        sd.stage = d.value("stage", 0);
        sd.replicas = d.value("replicas", 0);
        sd.decision = d.value("decision", "");
        sd.window_start = FromMs(d.value("window_start_ms", int64_t{0}));
        sd.at = FromMs(d.value("at_ms", int64_t{0}));
        if (d.contains("metrics") && d["metrics"].is_array()) {
          for (const json& m : d["metrics"]) {
            MetricComparison c;
            c.metric = m.value("metric", "");
            c.old_value = m.value("old", 0.0);
            c.new_value = m.value("new", 0.0);
            c.old_samples = m.value("old_samples", 0);
            c.new_samples = m.value("new_samples", 0);
            c.judged = m.value("judged", false);
            c.regressed = m.value("regressed", false);
            sd.metrics.push_back(std::move(c));
          }
        }
        s.decisions.push_back(std::move(sd));
      }
    }
    if (s.stage < 0 || s.stage > 64) return absl::DataLossError("rollout state: bad stage");
    return s;
  } catch (const json::exception& e) {
    return absl::DataLossError(StrCat("rollout state: ", e.what()));
  }
}

void MetricWindow::Add(const ReplicaSample& sample) {
  samples_.push_back(sample);
  while (samples_.size() > max_samples_) samples_.pop_front();
  while (!samples_.empty() && sample.at - samples_.front().at > max_age_) samples_.pop_front();
}

std::pair<double, int> MetricWindow::Summarize(std::string_view version, std::string_view metric,
                                               absl::Time from, absl::Time to) const {
  std::vector<double> values;
  for (const ReplicaSample& s : samples_) {
    if (s.at < from || s.at > to || s.version != version) continue;
    double v = Metric(s, metric);
    if (v >= 0) values.push_back(v);
  }
  if (values.empty()) return {0, 0};
  auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), mid, values.end());
  return {*mid, static_cast<int>(values.size())};
}

namespace {

bool Rolling(const RolloutState& st) {
  return st.phase == RolloutPhase::kProgressing || st.phase == RolloutPhase::kObserving;
}

// A spec change as the rollout sees it: a new version starts a rollout, the stable one again
// rolls back the rollout in progress or forgets a failed version.
void ReactToSpec(absl::Time now, const InferenceReplicaSpec& spec, RolloutStep& step) {
  RolloutState& st = step.state;
  const bool rolling = Rolling(st);
  if (rolling && spec.version == st.stable_version) {
    // The spec went back to the stable version: that is a rollback.
    RollBack(now, st, StrCat("the spec returned to ", st.stable_version), &step);
  } else if (!rolling && spec.version == st.stable_version && !st.failed_version.empty()) {
    // The spec names the stable version again, so the failed one is no longer asked for: a
    // later change back to it is a new request, and rolls out again (after an automatic rollback
    // the spec still names the failed version, and that alone never retries it).
    step.events.push_back(StrCat("the spec names ", st.stable_version, " again; ",
                                 st.failed_version, " (rolled back) may be rolled out anew"));
    st.failed_version.clear();
  } else if (!rolling && spec.version != st.stable_version && spec.version != st.failed_version) {
    st.target_version = spec.version;
    st.phase = RolloutPhase::kProgressing;
    st.stage = 0;
    st.paused = false;
    st.started = now;
    st.window_start = absl::InfinitePast();
    st.finished = absl::InfinitePast();
    st.failure.clear();
    st.decisions.clear();
    const std::vector<int> counts = RolloutStageCounts(spec);
    step.events.push_back(StrCat("rollout from ", st.stable_version, " to ", st.target_version,
                                 " started: stage 1 of ", counts.size(), " (",
                                 NewTarget(spec, counts, 0), " replicas)"));
  }
}

// The current stage's observation window has ended: roll back on a regression, promote when
// every metric with samples was judged; otherwise (too few samples) the window extends.
void JudgeStage(absl::Time now, const InferenceReplicaSpec& spec, int target, bool old_gone,
                const MetricWindow& metrics, RolloutStep& step) {
  RolloutState& st = step.state;
  std::vector<MetricComparison> cmp = Compare(spec, st, metrics, st.window_start, now, old_gone);
  const MetricComparison* worst = nullptr;
  bool all_judged = true, any_judged = false;
  for (const MetricComparison& c : cmp) {
    // A metric no replica reports (no samples on either side) is not judged and not waited for;
    // but at least one metric must be (no traffic: the window extends).
    if (!c.judged && (c.old_samples > 0 || c.new_samples > 0)) all_judged = false;
    any_judged = any_judged || c.judged;
    if (c.regressed && (!worst || c.new_value / std::max(1e-12, c.old_value) >
                                      worst->new_value / std::max(1e-12, worst->old_value))) {
      worst = &c;
    }
  }
  if (worst) {
    std::string why = StrCat(
        worst->metric, " ", Format(worst->metric, worst->new_value), " on ", st.target_version,
        " vs ", Format(worst->metric, worst->old_value), " on ", st.stable_version, " (threshold +",
        std::round(spec.rollout.regression_threshold * 1000) / 10, "%) over the ",
        DurationToString(absl::Trunc(now - st.window_start, absl::Seconds(1))), " window from ",
        absl::FormatTime("%H:%M:%S", st.window_start, absl::UTCTimeZone()), " UTC");
    StageDecision d;
    d.stage = st.stage;
    d.replicas = target;
    d.decision = "rolled back";
    d.window_start = st.window_start;
    d.at = now;
    d.metrics = cmp;
    st.decisions.push_back(std::move(d));
    RollBack(now, st, std::move(why), &step);
    return;
  }
  const bool no_old =
      old_gone && std::none_of(cmp.begin(), cmp.end(), [&](const MetricComparison& c) {
        return c.old_samples >= spec.rollout.min_samples;
      });
  const bool new_measured = std::any_of(cmp.begin(), cmp.end(), [&](const MetricComparison& c) {
    return c.new_samples >= spec.rollout.min_samples;
  });
  if (all_judged && any_judged) {
    NextStage(now, spec, st, std::move(cmp), "promoted", &step);
  } else if (no_old && new_measured) {
    // Nothing of the old version to compare with, now or from an earlier stage (it had no
    // replicas): waiting would never end, so the new version's own figures carry the stage.
    NextStage(now, spec, st, std::move(cmp), "promoted (no old replicas to compare with)", &step);
  }
}

}  // namespace

RolloutStep AdvanceRollout(absl::Time now, const InferenceReplicaSpec& spec,
                           const RolloutState& state, const std::map<std::string, int>& ready,
                           const MetricWindow& metrics) {
  RolloutStep step;
  RolloutState& st = step.state;
  st = state;
  if (st.stable_version.empty()) st.stable_version = spec.version;
  ReactToSpec(now, spec, step);
  if (!Rolling(st)) {
    SettledTracks(spec, st, ready, step);
    return step;
  }
  const int n = spec.replicas;
  const std::vector<int> counts = RolloutStageCounts(spec);
  st.stage = std::min<int>(st.stage, static_cast<int>(counts.size()) - 1);
  const int target = NewTarget(spec, counts, st.stage);
  auto get = [&](const std::string& v) {
    auto it = ready.find(v);
    return it == ready.end() ? 0 : it->second;
  };
  if (st.phase == RolloutPhase::kProgressing && get(st.target_version) >= target) {
    st.phase = RolloutPhase::kObserving;
    st.window_start = now;
    step.events.push_back(StrCat("rollout to ", st.target_version, ": stage ", st.stage + 1, " (",
                                 target, " replicas) ready; observing for ",
                                 DurationToString(spec.rollout.observe)));
  }
  if (st.phase == RolloutPhase::kObserving && !st.paused &&
      now - st.window_start >= spec.rollout.observe) {
    JudgeStage(now, spec, target, get(st.stable_version) == 0, metrics, step);
  }
  if (!Rolling(st)) {
    SettledTracks(spec, st, ready, step);
    return step;
  }
  // The new track at its stage; the old one shrinks only as new replicas are ready, at most
  // maxUnavailable ahead of them.
  const int stage_target = NewTarget(spec, counts, st.stage);
  const int ready_now = get(st.target_version);
  const int old_count =
      std::max(n - stage_target, n - std::min(stage_target, ready_now + MaxUnavailable(spec)));
  step.tracks[st.target_version] = stage_target;
  step.tracks[st.stable_version] = std::max(0, old_count);
  return step;
}

absl::StatusOr<RolloutCommand> ParseRolloutCommand(std::string_view name) {
  if (name == "pause") return RolloutCommand::kPause;
  if (name == "resume") return RolloutCommand::kResume;
  if (name == "promote") return RolloutCommand::kPromote;
  if (name == "rollback") return RolloutCommand::kRollback;
  return absl::InvalidArgumentError(
      StrCat("command \"", name, "\": expected pause, resume, promote or rollback"));
}

std::string_view RolloutCommandName(RolloutCommand command) {
  switch (command) {
    case RolloutCommand::kPause:
      return "pause";
    case RolloutCommand::kResume:
      return "resume";
    case RolloutCommand::kPromote:
      return "promote";
    case RolloutCommand::kRollback:
      return "rollback";
  }
  return "?";
}

absl::Status CheckApplyDuringRollout(const InferenceReplicaSpec& spec, const RolloutState& state) {
  const bool rolling =
      state.phase == RolloutPhase::kProgressing || state.phase == RolloutPhase::kObserving;
  if (!rolling || spec.version == state.target_version || spec.version == state.stable_version) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(StrCat(
      spec.name, ": spec.version ", spec.version, " refused: a rollout from ", state.stable_version,
      " to ", state.target_version, " is in progress (stage ", state.stage + 1,
      "); let it finish, or `exaserve-cli rollout rollback ", spec.name, "` first"));
}

absl::StatusOr<RolloutState> ApplyCommand(absl::Time now, const InferenceReplicaSpec& spec,
                                          RolloutState st, RolloutCommand command,
                                          const MetricWindow& metrics) {
  const bool rolling =
      st.phase == RolloutPhase::kProgressing || st.phase == RolloutPhase::kObserving;
  if (!rolling) {
    return absl::FailedPreconditionError(
        StrCat(spec.name, " has no rollout in progress (", RolloutPhaseName(st.phase),
               st.stable_version.empty() ? "" : StrCat(", stable ", st.stable_version),
               "); change spec.version to start one"));
  }
  switch (command) {
    case RolloutCommand::kPause:
      st.paused = true;
      break;
    case RolloutCommand::kResume:
      st.paused = false;
      break;
    case RolloutCommand::kPromote: {
      std::vector<MetricComparison> cmp;
      if (st.window_start != absl::InfinitePast()) {
        cmp = Compare(spec, st, metrics, st.window_start, now);
      }
      st.paused = false;
      NextStage(now, spec, st, std::move(cmp), "promoted by operator", nullptr);
      break;
    }
    case RolloutCommand::kRollback: {
      StageDecision d;
      d.stage = st.stage;
      d.decision = "rolled back by operator";
      d.window_start = st.window_start;
      d.at = now;
      st.decisions.push_back(std::move(d));
      RollBack(now, st, "rolled back by the operator", nullptr);
      break;
    }
  }
  return st;
}

std::vector<MetricComparison> CompareNow(absl::Time now, const InferenceReplicaSpec& spec,
                                         const RolloutState& state, const MetricWindow& metrics) {
  if (state.phase != RolloutPhase::kObserving || state.target_version.empty()) return {};
  return Compare(spec, state, metrics, state.window_start, now);
}

}  // namespace exa::scheduler
