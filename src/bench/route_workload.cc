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
  const auto prompt = std::llround(LogNormal(options_.prompt_median, options_.prompt_p99));
  w.prompt_tokens = static_cast<int32_t>(std::clamp<long long>(
      prompt, engine::kSimDirectiveTokens + 1, static_cast<long long>(options_.context) - 1));
  const int32_t room = options_.context - w.prompt_tokens;
  w.max_tokens = std::min(options_.max_tokens, room);
  const auto output = std::llround(LogNormal(options_.output_median, options_.output_p99));
  w.output_tokens =
      static_cast<int32_t>(std::clamp<long long>(output, 1, static_cast<long long>(room)));
  return w;
}

double Workload::NextGap(double rate_per_s) {
  return -std::log(1.0 - random_.UniformDouble()) / rate_per_s;
}

std::vector<int32_t> Workload::PromptTokens(const WorkItem& item, int32_t vocab) {
  std::vector<int32_t> tokens = engine::SimOutputLengthDirective(item.output_tokens);
  tokens.reserve(static_cast<size_t>(item.prompt_tokens));
  // Filler: ordinary ids (clear of the first 16, which a vocabulary keeps for special tokens).
  for (int32_t i = static_cast<int32_t>(tokens.size()); i < item.prompt_tokens; ++i) {
    tokens.push_back(16 + i % std::max(1, vocab - 16));
  }
  return tokens;
}

nlohmann::json Workload::Describe() const {
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
