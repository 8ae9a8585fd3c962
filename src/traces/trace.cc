#include "traces/trace.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/strings.h"

namespace exa::traces {
namespace {

using nlohmann::json;

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

int32_t TokenOf(uint64_t h, int32_t vocab) {
  return 16 + static_cast<int32_t>(h % static_cast<uint64_t>(std::max(1, vocab - 16)));
}

absl::Status CheckLengths(const std::string& where, int64_t input, int64_t output) {
  if (input < 1 || input > (int64_t{1} << 24) || output < 0 || output > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(StrCat(where, ": input length ", input, " and output length ",
                                             output, " must be in [1, 2^24] and [0, 2^24]"));
  }
  return absl::OkStatus();
}

absl::Status ReadMooncake(std::ifstream& in, Trace& t) {
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const std::string where = StrCat(t.path, ":", line_no);
    try {
      const json j = json::parse(line);
      TraceRequest r;
      r.arrival_s = j.at("timestamp").get<double>() / 1000.0;
      const auto input = j.at("input_length").get<int64_t>();
      const auto output = j.at("output_length").get<int64_t>();
      if (auto s = CheckLengths(where, input, output); !s.ok()) return s;
      r.input_length = static_cast<int32_t>(input);
      r.output_length = static_cast<int32_t>(output);
      if (j.contains("hash_ids")) r.hash_ids = j.at("hash_ids").get<std::vector<int64_t>>();
      if (static_cast<int64_t>(r.hash_ids.size()) * kTraceBlockTokens <
          input - kTraceBlockTokens + 1) {
        r.hash_ids.clear();  // ids that do not cover the prompt are not trusted for sharing
      }
      t.requests.push_back(std::move(r));
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(StrCat(where, ": ", e.what()));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadAzure(std::ifstream& in, const std::string& header, Trace& t) {
  const std::vector<std::string> columns = absl::StrSplit(absl::StripAsciiWhitespace(header), ',');
  int ts = -1, context = -1, generated = -1;
  for (int i = 0; i < static_cast<int>(columns.size()); ++i) {
    if (columns[i] == "TIMESTAMP") ts = i;
    if (columns[i] == "ContextTokens") context = i;
    if (columns[i] == "GeneratedTokens") generated = i;
  }
  if (ts < 0 || context < 0 || generated < 0) {
    return absl::InvalidArgumentError(
        StrCat(t.path, ":1: header \"", header,
               "\": expected the columns TIMESTAMP, ContextTokens and GeneratedTokens"));
  }
  const int need = std::max({ts, context, generated});
  int line_no = 1;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const std::string where = StrCat(t.path, ":", line_no);
    const std::vector<std::string> f = absl::StrSplit(absl::StripAsciiWhitespace(line), ',');
    if (static_cast<int>(f.size()) <= need) {
      return absl::InvalidArgumentError(
          StrCat(where, ": ", f.size(), " fields, expected ", columns.size()));
    }
    absl::Time at;
    std::string err;
    if (!absl::ParseTime("%Y-%m-%d %H:%M:%E*S", f[ts], absl::UTCTimeZone(), &at, &err)) {
      return absl::InvalidArgumentError(
          StrCat(where, ": TIMESTAMP \"", f[ts], "\": expected YYYY-MM-DD HH:MM:SS[.fraction]"));
    }
    int64_t input = 0, output = 0;
    if (!absl::SimpleAtoi(f[context], &input) || !absl::SimpleAtoi(f[generated], &output)) {
      return absl::InvalidArgumentError(StrCat(where, ": ContextTokens \"", f[context],
                                               "\" and GeneratedTokens \"", f[generated],
                                               "\" must be integers"));
    }
    if (auto s = CheckLengths(where, input, output); !s.ok()) return s;
    TraceRequest r;
    // Seconds since the Unix epoch; ReadTrace then makes every trace start at its first arrival.
    r.arrival_s = absl::ToDoubleSeconds(at - absl::UnixEpoch());
    r.input_length = static_cast<int32_t>(input);
    r.output_length = static_cast<int32_t>(output);
    t.requests.push_back(std::move(r));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Trace> ReadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("--trace \"", path, "\": cannot open"));
  Trace t;
  t.path = path;
  std::string first;
  while (std::getline(in, first) && absl::StripAsciiWhitespace(first).empty()) {
  }
  if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(first), "{")) {
    t.format = "mooncake";
    in.clear();
    in.seekg(0);
    if (auto s = ReadMooncake(in, t); !s.ok()) return s;
  } else {
    t.format = "azure";
    if (auto s = ReadAzure(in, first, t); !s.ok()) return s;
  }
  if (t.requests.empty()) return absl::InvalidArgumentError(StrCat(path, ": no requests"));
  // Arrival order, as recorded (a stable sort keeps the file's order among equal stamps).
  std::stable_sort(
      t.requests.begin(), t.requests.end(),
      [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
  const double t0 = t.requests.front().arrival_s;
  for (TraceRequest& r : t.requests) r.arrival_s -= t0;
  t.duration_s = t.requests.back().arrival_s;
  return t;
}

absl::StatusOr<std::optional<Trace>> ReadTraceIfAny(const std::string& path) {
  if (path.empty()) return std::optional<Trace>();
  absl::StatusOr<Trace> t = ReadTrace(path);
  if (!t.ok()) return t.status();
  return std::optional<Trace>(*std::move(t));
}

nlohmann::json Trace::Describe() const {
  std::vector<double> in, out;
  int64_t blocks = 0;
  for (const TraceRequest& r : requests) {
    in.push_back(r.input_length);
    out.push_back(r.output_length);
    blocks += static_cast<int64_t>(r.hash_ids.size());
  }
  std::sort(in.begin(), in.end());
  std::sort(out.begin(), out.end());
  const auto q = [](const std::vector<double>& v, double p) {
    return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
  };
  return {{"path", path},
          {"format", format},
          {"requests", requests.size()},
          {"duration_s", duration_s},
          {"prompt_tokens", {{"p50", q(in, 0.5)}, {"p99", q(in, 0.99)}}},
          {"output_tokens", {{"p50", q(out, 0.5)}, {"p99", q(out, 0.99)}}},
          {"prefix_blocks", blocks}};
}

std::vector<int32_t> TracePromptTokens(const TraceRequest& r, size_t index, int32_t vocab) {
  std::vector<int32_t> tokens(static_cast<size_t>(r.input_length));
  for (int32_t i = 0; i < r.input_length; ++i) {
    const auto block = static_cast<size_t>(i / kTraceBlockTokens);
    const uint64_t seed = block < r.hash_ids.size() ? static_cast<uint64_t>(r.hash_ids[block])
                                                    : (uint64_t{1} << 62) + index * 1000003 + block;
    tokens[static_cast<size_t>(i)] =
        TokenOf(SplitMix(seed * 4096 + static_cast<uint64_t>(i % kTraceBlockTokens)), vocab);
  }
  return tokens;
}

std::vector<int32_t> UniqueTokens(uint64_t salt, int32_t count, int32_t vocab) {
  std::vector<int32_t> tokens(static_cast<size_t>(std::max(0, count)));
  const uint64_t base = SplitMix(salt ^ 0x5DEECE66DULL) << 20;
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = TokenOf(SplitMix(base + i), vocab);
  return tokens;
}

}  // namespace exa::traces
