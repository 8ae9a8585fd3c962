// Recorded request traces for the benchmarks and the simulator (docs/perf/routing.md#traces), read
// as they are:
//   - Mooncake JSON lines: `timestamp` (ms from the start), `input_length`, `output_length` and
//     `hash_ids` (one id per 512-token prompt block; equal ids at the same position are the same
//     prefix block);
//   - CSV with a header naming a time, a prompt length and an output length column: Azure's LLM
//     inference traces (`TIMESTAMP,ContextTokens,GeneratedTokens`, wall-clock times such as
//     "2023-11-16 18:15:46.6805900" or, in the 2024 traces, with a UTC offset), BurstGPT's
//     (`Timestamp` in seconds, `Request tokens`, `Response tokens`), or the same names as
//     Mooncake's (`timestamp`, `input_length`, `output_length`; a CSV time is in seconds). Names
//     compare without case, blanks or '_'; other columns are ignored. No block ids, so no shared
//     prefixes.
// The format is told by the content (a first line that opens a JSON object is Mooncake).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exa::traces {

struct TraceRequest {
  double arrival_s = 0;  // from the trace's first request
  int32_t input_length = 0;
  int32_t output_length = 0;
  std::vector<int64_t> hash_ids;  // empty when the trace has none
};

struct Trace {
  std::string path;
  std::string format;                  // "mooncake", "azure" or "csv"
  std::vector<TraceRequest> requests;  // in arrival order
  double duration_s = 0;               // last arrival - first
  nlohmann::json Describe() const;
};

// A trace's block size: Mooncake hashes 512-token blocks.
inline constexpr int32_t kTraceBlockTokens = 512;

// INVALID_ARGUMENT names the file, line and field; NOT_FOUND when the file cannot be opened.
absl::StatusOr<Trace> ReadTrace(const std::string& path);
// ReadTrace, or no trace when `path` is empty.
absl::StatusOr<std::optional<Trace>> ReadTraceIfAny(const std::string& path);

// The prompt's token ids: block b is a deterministic function of hash_ids[b] (equal ids give
// equal tokens, hence equal prefixes); tokens past the listed blocks are unique to request
// `index`. Ids stay clear of the first 16 (special tokens and the sim's directive marker).
std::vector<int32_t> TracePromptTokens(const TraceRequest& r, size_t index, int32_t vocab);

// Ids clear of the first 16 that no other `salt` reproduces: a prompt that shares nothing.
std::vector<int32_t> UniqueTokens(uint64_t salt, int32_t count, int32_t vocab);

}  // namespace exa::traces
