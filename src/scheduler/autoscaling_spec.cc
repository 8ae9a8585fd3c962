// spec.autoscaling: parsing, the cross-field rules and canonical YAML (spec.h,
// docs/architecture.md#autoscaling).
#include <algorithm>
#include <cmath>
#include <iterator>

#include "scheduler/spec.h"
#include "scheduler/spec_reader.h"

namespace exa::scheduler {
namespace spec_internal {
namespace {

constexpr absl::Duration kMaxStabilization = absl::Hours(1);

absl::Status ParseWindow(const Reader& r, const YAML::Node& n, std::string_view path,
                         absl::Duration& out) {
  EXA_ASSIGN_OR_RETURN(out, r.Duration(n, path));
  if (out > kMaxStabilization) return r.Error(n, path, "must be at most 1h");
  return absl::OkStatus();
}

absl::Status ParseRate(const Reader& r, const YAML::Node& n, std::string_view path, double lo,
                       bool lo_open, double hi, double& out) {
  if (!n.IsScalar()) return r.Error(n, path, "must be a number");
  char* end = nullptr;
  out = std::strtod(n.Scalar().c_str(), &end);
  if (n.Scalar().empty() || *end != '\0' || !std::isfinite(out) || out > hi ||
      (lo_open ? out <= lo : out < lo)) {
    return r.Error(n, path,
                   StrCat("\"", n.Scalar(), "\": must be a number in ", lo_open ? "(" : "[", lo,
                          ", ", hi, "]"));
  }
  return absl::OkStatus();
}

// The target in the metric's unit: tokens per replica, or a duration for the latency metrics.
absl::Status ParseTarget(const Reader& r, const YAML::Node& n, const std::string& metric,
                         double& out) {
  constexpr std::string_view kPath = "spec.autoscaling.target";
  if (LatencyMetric(metric)) {
    EXA_ASSIGN_OR_RETURN(absl::Duration d, r.Duration(n, kPath));
    if (d <= absl::ZeroDuration() || d > absl::Minutes(10)) {
      return r.Error(n, kPath,
                     StrCat("\"", n.Scalar(), "\": ", metric,
                            " takes a duration above 0 and at most 10m, like 500ms"));
    }
    out = absl::ToDoubleSeconds(d);
    return absl::OkStatus();
  }
  return ParseRate(r, n, kPath, 0, /*lo_open=*/true, 1e9, out);
}

}  // namespace

bool LatencyMetric(std::string_view metric) { return metric != "pendingTokensPerReplica"; }

absl::Status ParseAutoscaling(const Reader& r, const YAML::Node& n, AutoscalingSpec& out) {
  constexpr std::string_view kPath = "spec.autoscaling";
  EXA_RETURN_IF_ERROR(
      r.CheckMap(n, kPath,
                 {"minReplicas", "maxReplicas", "metric", "target", "scaleUpStabilization",
                  "scaleDownStabilization", "maxScaleUpRate", "maxScaleDownRate"}));
  out.enabled = true;
  if (n["minReplicas"]) {
    EXA_ASSIGN_OR_RETURN(out.min_replicas,
                         r.Int(n["minReplicas"], "spec.autoscaling.minReplicas", 0, kMaxReplicas));
  }
  if (!n["maxReplicas"]) return r.Error(n, "spec.autoscaling.maxReplicas", "is required");
  EXA_ASSIGN_OR_RETURN(out.max_replicas,
                       r.Int(n["maxReplicas"], "spec.autoscaling.maxReplicas", 1, kMaxReplicas));
  if (n["metric"]) {
    EXA_ASSIGN_OR_RETURN(out.metric, r.String(n["metric"], "spec.autoscaling.metric"));
    if (std::find(std::begin(kAutoscalingMetrics), std::end(kAutoscalingMetrics), out.metric) ==
        std::end(kAutoscalingMetrics)) {
      return r.Error(n["metric"], "spec.autoscaling.metric",
                     StrCat("\"", out.metric,
                            "\": expected pendingTokensPerReplica, queueTimeP90 or ttftP99"));
    }
  }
  if (!n["target"]) return r.Error(n, "spec.autoscaling.target", "is required");
  EXA_RETURN_IF_ERROR(ParseTarget(r, n["target"], out.metric, out.target));
  if (n["scaleUpStabilization"]) {
    EXA_RETURN_IF_ERROR(ParseWindow(r, n["scaleUpStabilization"],
                                    "spec.autoscaling.scaleUpStabilization",
                                    out.scale_up_stabilization));
  }
  if (n["scaleDownStabilization"]) {
    EXA_RETURN_IF_ERROR(ParseWindow(r, n["scaleDownStabilization"],
                                    "spec.autoscaling.scaleDownStabilization",
                                    out.scale_down_stabilization));
  }
  if (n["maxScaleUpRate"]) {
    EXA_RETURN_IF_ERROR(ParseRate(r, n["maxScaleUpRate"], "spec.autoscaling.maxScaleUpRate", 1,
                                  /*lo_open=*/true, 1000, out.max_scale_up_rate));
  }
  if (n["maxScaleDownRate"]) {
    EXA_RETURN_IF_ERROR(ParseRate(r, n["maxScaleDownRate"], "spec.autoscaling.maxScaleDownRate", 0,
                                  /*lo_open=*/true, 1, out.max_scale_down_rate));
  }
  return absl::OkStatus();
}

}  // namespace spec_internal

absl::Status ValidateAutoscaling(const InferenceReplicaSpec& s) {
  const AutoscalingSpec& a = s.autoscaling;
  if (!a.enabled) return absl::OkStatus();
  if (a.min_replicas < 0 || a.max_replicas < a.min_replicas) {
    return absl::InvalidArgumentError(StrCat("spec.autoscaling: minReplicas ", a.min_replicas,
                                             " and maxReplicas ", a.max_replicas,
                                             ": need 0 <= minReplicas <= maxReplicas"));
  }
  if (s.replicas < a.min_replicas || s.replicas > a.max_replicas) {
    return absl::InvalidArgumentError(StrCat(
        "spec.replicas: ", s.replicas, " is the starting count and must be within ",
        "spec.autoscaling [minReplicas ", a.min_replicas, ", maxReplicas ", a.max_replicas, "]"));
  }
  for (size_t i = 0; i < s.rollout.stages.size(); ++i) {
    if (s.rollout.stages[i].percent <= 0) {
      return absl::InvalidArgumentError(
          StrCat("spec.rollout.stages[", i, "]: ", s.rollout.stages[i].replicas,
                 " is a count; with spec.autoscaling the count moves, so stages are percentages "
                 "(10%)"));
    }
  }
  if (std::find(std::begin(kAutoscalingMetrics), std::end(kAutoscalingMetrics), a.metric) ==
          std::end(kAutoscalingMetrics) ||
      !(a.target > 0) || a.max_scale_up_rate <= 1 || a.max_scale_down_rate <= 0 ||
      a.max_scale_down_rate > 1) {
    return absl::InvalidArgumentError(
        "spec.autoscaling: needs a known metric, a target above 0, maxScaleUpRate above 1 and "
        "maxScaleDownRate in (0, 1]");
  }
  return absl::OkStatus();
}

std::string AutoscalingToYaml(const AutoscalingSpec& a) {
  if (!a.enabled) return "";
  const std::string target = spec_internal::LatencyMetric(a.metric)
                                 ? DurationToString(absl::Seconds(a.target))
                                 : StrCat(a.target);
  return StrCat("  autoscaling:\n    minReplicas: ", a.min_replicas,
                "\n    maxReplicas: ", a.max_replicas, "\n    metric: ", a.metric,
                "\n    target: ", target,
                "\n    scaleUpStabilization: ", DurationToString(a.scale_up_stabilization),
                "\n    scaleDownStabilization: ", DurationToString(a.scale_down_stabilization),
                "\n    maxScaleUpRate: ", a.max_scale_up_rate,
                "\n    maxScaleDownRate: ", a.max_scale_down_rate, "\n");
}

}  // namespace exa::scheduler
