#include "traces/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/status.h"
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

// A CSV field without the blanks and the double quotes around it.
absl::string_view Unquoted(absl::string_view field) {
  field = absl::StripAsciiWhitespace(field);
  if (field.size() >= 2 && field.front() == '"' && field.back() == '"') {
    field = absl::StripAsciiWhitespace(field.substr(1, field.size() - 2));
  }
  return field;
}

// A CSV column's name as compared: unquoted, lower case, '_' and ' ' dropped.
std::string ColumnKey(absl::string_view name) {
  std::string key;
  for (char c : Unquoted(name)) {
    if (c != '_' && c != ' ') key += absl::ascii_tolower(static_cast<unsigned char>(c));
  }
  return key;
}

// The columns a CSV trace is read by, found by name in its header.
struct CsvColumns {
  int time = -1, input = -1, output = -1;
  bool azure = false;  // Azure's own names
};

absl::StatusOr<CsvColumns> FindColumns(const std::string& path, absl::string_view header) {
  const std::vector<absl::string_view> names =
      absl::StrSplit(absl::StripAsciiWhitespace(header), ',');
  CsvColumns c;
  const auto is = [](const std::string& key, std::initializer_list<absl::string_view> any) {
    return std::find(any.begin(), any.end(), key) != any.end();
  };
  for (int i = 0; i < static_cast<int>(names.size()); ++i) {
    const std::string key = ColumnKey(names[static_cast<size_t>(i)]);
    if (c.time < 0 && is(key, {"timestamp", "arrivaltime", "time"})) c.time = i;
    if (c.input < 0 &&
        is(key, {"contexttokens", "requesttokens", "inputlength", "inputtokens", "prompttokens"})) {
      c.input = i;
    }
    if (c.output < 0 && is(key, {"generatedtokens", "responsetokens", "outputlength",
                                 "outputtokens", "completiontokens"})) {
      c.output = i;
    }
  }
  if (c.time < 0 || c.input < 0 || c.output < 0) {
    return absl::InvalidArgumentError(
        StrCat(path, ":1: header \"", header,
               "\": expected a time column (TIMESTAMP, Timestamp), a prompt length column "
               "(ContextTokens, Request tokens, input_length) and an output length column "
               "(GeneratedTokens, Response tokens, output_length)"));
  }
  c.azure = Unquoted(names[static_cast<size_t>(c.input)]) == "ContextTokens";
  return c;
}

// A CSV time: seconds as a number, or a wall-clock date and time ("2023-11-16 18:15:46.68",
// 'T' between them or not, with or without a UTC offset or 'Z'), as seconds since the epoch.
std::optional<double> ParseCsvTime(absl::string_view field) {
  field = Unquoted(field);
  double seconds = 0;
  if (absl::SimpleAtod(field, &seconds) && std::isfinite(seconds)) return seconds;
  std::string text(field);
  if (text.size() > 10 && text[10] == 'T') text[10] = ' ';
  if (!text.empty() && (text.back() == 'Z' || text.back() == 'z')) {
    text.pop_back();
    text += "+00:00";
  }
  absl::Time at;
  std::string err;
  for (const char* format : {"%Y-%m-%d %H:%M:%E*S%Ez", "%Y-%m-%d %H:%M:%E*S"}) {
    if (absl::ParseTime(format, text, absl::UTCTimeZone(), &at, &err)) {
      return absl::ToDoubleSeconds(at - absl::UnixEpoch());
    }
  }
  return std::nullopt;
}

absl::Status ReadCsv(std::ifstream& in, const std::string& header, Trace& t) {
  EXA_ASSIGN_OR_RETURN(const CsvColumns c, FindColumns(t.path, header));
  t.format = c.azure ? "azure" : "csv";
  const int need = std::max({c.time, c.input, c.output});
  int line_no = 1;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const std::string where = StrCat(t.path, ":", line_no);
    const std::vector<absl::string_view> f = absl::StrSplit(absl::StripAsciiWhitespace(line), ',');
    if (static_cast<int>(f.size()) <= need) {
      return absl::InvalidArgumentError(
          StrCat(where, ": ", f.size(), " fields, expected at least ", need + 1));
    }
    const std::optional<double> at = ParseCsvTime(f[static_cast<size_t>(c.time)]);
    if (!at) {
      return absl::InvalidArgumentError(
          StrCat(where, ": time \"", f[static_cast<size_t>(c.time)],
                 "\": expected seconds or YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]"));
    }
    int64_t input = 0, output = 0;
    if (!absl::SimpleAtoi(Unquoted(f[static_cast<size_t>(c.input)]), &input) ||
        !absl::SimpleAtoi(Unquoted(f[static_cast<size_t>(c.output)]), &output)) {
      return absl::InvalidArgumentError(StrCat(
          where, ": prompt length \"", f[static_cast<size_t>(c.input)], "\" and output length \"",
          f[static_cast<size_t>(c.output)], "\" must be integers"));
    }
    if (auto s = CheckLengths(where, input, output); !s.ok()) return s;
    TraceRequest r;
    // ReadTrace then makes every trace start at its first arrival.
    r.arrival_s = *at;
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
  // A UTF-8 byte order mark (what spreadsheet programs write at the head of a CSV) is skipped.
  constexpr absl::string_view kBom = "\xEF\xBB\xBF";
  char head[3] = {};
  in.read(head, 3);
  const std::streamoff start = absl::string_view(head, 3) == kBom ? 3 : 0;
  in.clear();
  in.seekg(start);
  std::string first;
  while (std::getline(in, first) && absl::StripAsciiWhitespace(first).empty()) {
  }
  if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(first), "{")) {
    t.format = "mooncake";
    in.clear();
    in.seekg(start);
    if (auto s = ReadMooncake(in, t); !s.ok()) return s;
  } else {
    if (auto s = ReadCsv(in, first, t); !s.ok()) return s;
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
