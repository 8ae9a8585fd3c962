#include "node/replica_health.h"

#include "common/strings.h"
#include "common/units.h"

namespace exa::node {

void RegisterConfig(config::Schema& s, std::string_view section, HealthOptions* o) {
  std::string p(section);
  auto positive = [](const absl::Duration& d) {
    return d > absl::ZeroDuration() ? std::string() : std::string("must be positive");
  };
  s.Add<absl::Duration>(p + ".process_interval", &o->process_interval,
                        "process level: how often a stuck step loop is looked for", positive);
  s.Add<absl::Duration>(p + ".model_interval", &o->model_interval,
                        "model level: how often each replica answers the probe", positive);
  s.Add<absl::Duration>(p + ".probe_timeout", &o->probe_timeout,
                        "a probe not answered within this is a failure", positive);
  s.Add(p + ".probe_prompt", &o->probe_prompt, "the model-level probe's prompt");
  s.Add<absl::Duration>(p + ".performance_interval", &o->performance_interval,
                        "performance level: how often gateways compare replicas' P99", positive);
  s.Add<double>(p + ".performance_factor", &o->performance_factor,
                "eject a replica whose inter-token P99 exceeds this × its model's median",
                [](const double& v) { return v > 1 ? std::string() : StrCat(v, ": must be > 1"); });
  s.Add<int>(p + ".performance_min_peers", &o->performance_min_peers,
             "replicas of a model needed before any is judged an outlier", [](const int& v) {
               return v >= 2 ? std::string() : StrCat(v, ": must be at least 2");
             });
  s.Add(p + ".probe_expect", &o->probe_expect,
        "text the bundled model's answer must contain; empty (and for every other model): the "
        "first answer is the golden one");
}

void ReplicaHealth::OnProcessCheck(uint64_t steps, bool has_work) {
  // Stalled: work was waiting at the previous check too and not one step ran since. Work that
  // arrived just now at an idle replica is not a stall.
  if (have_steps_ && has_work && had_work_ && steps == last_steps_) {
    stalled_reason_ = StrCat("step loop stalled: no engine step in ",
                             DurationToString(options_.process_interval), " with work queued");
  } else if (steps != last_steps_ || !has_work) {
    stalled_reason_.clear();
  }
  have_steps_ = true;
  had_work_ = has_work;
  last_steps_ = steps;
}

void ReplicaHealth::OnProbeResult(const std::optional<std::string>& answer) {
  if (!answer) {
    ++probes_failed_;
    probe_reason_ = StrCat("model probe \"", options_.probe_prompt, "\" not answered within ",
                           DurationToString(options_.probe_timeout));
    return;
  }
  std::string expect = options_.probe_expect;
  if (expect.empty()) {
    if (golden_.empty()) golden_ = *answer;
    expect = golden_;
  }
  if (answer->find(expect) == std::string::npos) {
    ++probes_failed_;
    probe_reason_ = StrCat("model probe \"", options_.probe_prompt, "\" answered \"", *answer,
                           "\", expected \"", expect, "\"");
    return;
  }
  ++probes_ok_;
  probe_reason_.clear();
}

std::string ReplicaHealth::reason() const {
  if (!stalled_reason_.empty()) return stalled_reason_;
  return probe_reason_;
}

}  // namespace exa::node
