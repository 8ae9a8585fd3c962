// The routing benchmark's workload, fixed and the same for `--mode sim` and
// `--mode live`:
//   - prompt tokens ~ lognormal with median 70 and p99 3400 (sigma = ln(3400/70) / 2.326);
//   - output tokens ~ lognormal with median 200 and p99 1200 (sigma = ln(6) / 2.326);
//   - prompts are capped to context - 1 and floored at 5 tokens (the sim's 4-token output-length
//     directive plus one), outputs floored at 1 and capped to the context left;
//   - every client asks for max_tokens = 2048, clamped to the context left after the prompt (the
//     gateway refuses prompt + max_tokens beyond the context; clients clamp, as OpenAI's do);
//   - arrivals are Poisson.
// Or a recorded trace (bench/trace.h), used as recorded: its requests in order, its prompt and
// output lengths (capped to the context as above), its inter-arrival gaps scaled by one factor
// so the mean rate is the one asked for; Mooncake block ids become shared prompt blocks. Past
// the trace's end it starts over (new request indices, so tails stay unique).
// The true output length travels only inside the prompt as the sim engine's output-length
// directive (engine/step_executor.h): at the start of a synthetic prompt, at the end of a trace's
// (so shared prefixes stay shared). The gateway and router see a prompt of N tokens and
// max_tokens, nothing else.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/random.h"
#include "nlohmann/json.hpp"
#include "traces/trace.h"

namespace exa::bench {

struct WorkloadOptions {
  double prompt_median = 70, prompt_p99 = 3400;
  double output_median = 200, output_p99 = 1200;
  int32_t max_tokens = 2048;
  int32_t context = 4096;
};

struct WorkItem {
  int64_t index = 0;  // the request's serial number (salts its unique tokens)
  const traces::TraceRequest* trace = nullptr;  // the recorded request, in trace mode
  int32_t prompt_tokens = 0;
  int32_t output_tokens = 0;  // the truth; only the sim engine learns it (directive)
  int32_t max_tokens = 0;     // what the client sends
};

class Workload {
 public:
  // `trace` (optional) must outlive the workload.
  Workload(const WorkloadOptions& options, uint64_t seed, const traces::Trace* trace = nullptr)
      : options_(options), random_(seed), trace_(trace) {}

  WorkItem Next();
  // Seconds to the next arrival at a mean `rate_per_s`: Poisson, or the trace's next gap scaled.
  double NextGap(double rate_per_s);
  // The prompt's token ids with the sim output-length directive; synthetic prompts share
  // nothing, a trace's share what its block ids share.
  static std::vector<int32_t> PromptTokens(const WorkItem& item, int32_t vocab);
  const traces::Trace* trace() const { return trace_; }

  nlohmann::json Describe() const;

 private:
  double Normal();
  double LogNormal(double median, double p99);

  WorkloadOptions options_;
  Random random_;
  const traces::Trace* trace_;
  int64_t issued_ = 0;  // items handed out
  int64_t gaps_ = 0;    // gaps handed out
};

// The q-quantile (nearest rank) of `values`; 0 when empty. Sorts a copy.
double Quantile(std::vector<double> values, double q);

}  // namespace exa::bench
