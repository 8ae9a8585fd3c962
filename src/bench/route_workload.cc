#include "bench/route_workload.h"

#include <algorithm>
#include <numbers>

#include "engine/step_executor.h"

namespace exa::bench {
namespace {

// z of the 99th percentile of the standard normal.
constexpr double kZ99 = 2.3263478740408408;

}  // namespace

double Workload::Normal() {
  // Box-Muller on the seeded stream: the same numbers on every platform.
  const double u1 = 1.0 - random_.UniformDouble();  // (0, 1]
  const double u2 = random_.UniformDouble();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double Workload::LogNormal(double median, double p99) {
  const double sigma = std::log(p99 / median) / kZ99;
  return median * std::exp(sigma * Normal());
}

WorkItem Workload::Next() {
  WorkItem w;
  w.index = issued_++;
  long long prompt = 0, output = 0;
  if (trace_ != nullptr) {
    w.trace = &trace_->requests[static_cast<size_t>(w.index) % trace_->requests.size()];
    prompt = w.trace->input_length;
    output = w.trace->output_length;
  } else {
    prompt = std::llround(LogNormal(options_.prompt_median, options_.prompt_p99));
  }
  w.prompt_tokens = static_cast<int32_t>(std::clamp<long long>(
      prompt, engine::kSimDirectiveTokens + 1, static_cast<long long>(options_.context) - 1));
  const int32_t room = options_.context - w.prompt_tokens;
  w.max_tokens = std::min(options_.max_tokens, room);
  if (trace_ == nullptr)
    output = std::llround(LogNormal(options_.output_median, options_.output_p99));
  w.output_tokens =
      static_cast<int32_t>(std::clamp<long long>(output, 1, static_cast<long long>(room)));
  return w;
}

double Workload::NextGap(double rate_per_s) {
  if (trace_ == nullptr) return -std::log(1.0 - random_.UniformDouble()) / rate_per_s;
  const auto& r = trace_->requests;
  const size_t n = r.size();
  const size_t i = static_cast<size_t>(gaps_++) % n;
  // The trace's own mean gap; across the wrap, one mean gap.
  const double mean =
      n > 1 && trace_->duration_s > 0 ? trace_->duration_s / static_cast<double>(n - 1) : 1.0;
  const double gap = i + 1 < n ? r[i + 1].arrival_s - r[i].arrival_s : mean;
  return gap / mean / rate_per_s;
}

std::vector<int32_t> Workload::PromptTokens(const WorkItem& item, int32_t vocab) {
  const std::vector<int32_t> directive = engine::SimOutputLengthDirective(item.output_tokens);
  const auto n = static_cast<size_t>(item.prompt_tokens);
  if (item.trace != nullptr) {
    std::vector<int32_t> tokens =
        traces::TracePromptTokens(*item.trace, static_cast<size_t>(item.index), vocab);
    tokens.resize(n);  // capped to the context
    std::copy(directive.begin(), directive.end(),
              tokens.end() - static_cast<long>(directive.size()));
    return tokens;
  }
  std::vector<int32_t> tokens = directive;
  const std::vector<int32_t> filler =
      traces::UniqueTokens(static_cast<uint64_t>(item.index),
                           item.prompt_tokens - static_cast<int32_t>(directive.size()), vocab);
  tokens.insert(tokens.end(), filler.begin(), filler.end());
  return tokens;
}

nlohmann::json Workload::Describe() const {
  if (trace_ != nullptr) {
    nlohmann::json t = trace_->Describe();
    t["arrivals"] = "the trace's gaps, scaled to the offered rate";
    t["clamp"] = {{"prompt", {engine::kSimDirectiveTokens + 1, options_.context - 1}},
                  {"output", "1 .. context - prompt"}};
    t["max_tokens_sent"] = options_.max_tokens;
    t["context"] = options_.context;
    t["true_output_length"] = "only in the prompt's sim output-length directive (its last tokens)";
    return t;
  }
  return {
      {"prompt_tokens",
       {{"distribution", "lognormal"},
        {"median", options_.prompt_median},
        {"p99", options_.prompt_p99},
        {"clamp", {engine::kSimDirectiveTokens + 1, options_.context - 1}}}},
      {"output_tokens",
       {{"distribution", "lognormal"},
        {"median", options_.output_median},
        {"p99", options_.output_p99},
        {"clamp", "1 .. context - prompt"}}},
      {"max_tokens_sent", options_.max_tokens},
      {"max_tokens_note", "clamped to context - prompt, which the gateway requires"},
      {"context", options_.context},
      {"arrivals", "poisson"},
      {"true_output_length", "only in the prompt's sim output-length directive"},
  };
}

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  const size_t rank = std::min(values.size() - 1, static_cast<size_t>(q * values.size()));
  std::nth_element(values.begin(), values.begin() + static_cast<long>(rank), values.end());
  return values[rank];
}

}  // namespace exa::bench
