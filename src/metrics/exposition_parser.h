// A parser for the Prometheus text exposition format 0.0.4: what an observer reads from each
// node's /metrics (docs/architecture.md#monitoring-and-alerts). Comments (# HELP, # TYPE) are
// skipped and timestamps ignored; histograms arrive as their _bucket, _sum and _count samples.
//
//   auto samples = ParseExposition(body, [](std::string_view name) { return name == "up"; });
//
// Pure and sans-IO. Bounded: a body with more than `max_samples` kept samples, or a label set
// with more than kMaxLabels labels, is refused rather than grown into.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace exa::metrics {

// Label name → value, sorted by name (the parser sorts them), so equal sets compare equal.
using LabelSet = std::vector<std::pair<std::string, std::string>>;

struct ParsedSample {
  std::string name;
  LabelSet labels;
  double value = 0;
};

inline constexpr size_t kMaxLabels = 64;

// Parses `text`. Samples whose metric name `keep` rejects are skipped without parsing their
// labels (an empty `keep` keeps every sample). Errors (INVALID_ARGUMENT) name the line and what
// was expected there; RESOURCE_EXHAUSTED past `max_samples` kept samples.
absl::StatusOr<std::vector<ParsedSample>> ParseExposition(
    std::string_view text, const std::function<bool(std::string_view name)>& keep = {},
    size_t max_samples = 1'000'000);

// The value of label `name` in `labels`, or "" when absent.
std::string_view LabelValue(const LabelSet& labels, std::string_view name);

}  // namespace exa::metrics
