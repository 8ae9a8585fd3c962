#include "metrics/exposition_parser.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/status/status.h"
#include "common/strings.h"

namespace exa::metrics {
namespace {

bool NameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool NameChar(char c) { return NameStart(c) || c == ':' || (c >= '0' && c <= '9'); }
bool Space(char c) { return c == ' ' || c == '\t'; }

// One line, consumed left to right; every method returns false on malformed input.
class LineParser {
 public:
  explicit LineParser(std::string_view line) : s_(line) {}

  void SkipSpaces() {
    while (pos_ < s_.size() && Space(s_[pos_])) ++pos_;
  }
  bool AtEnd() const { return pos_ >= s_.size(); }
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }

  // A metric or label name; metric names may also contain ':'.
  bool Name(bool metric, std::string_view* out) {
    size_t start = pos_;
    if (pos_ >= s_.size() || !(NameStart(s_[pos_]) || (metric && s_[pos_] == ':'))) return false;
    ++pos_;
    while (pos_ < s_.size() && (NameChar(s_[pos_]) && (metric || s_[pos_] != ':'))) ++pos_;
    *out = s_.substr(start, pos_ - start);
    return true;
  }

  // A double-quoted label value with \\, \" and \n escapes.
  bool QuotedValue(std::string* out) {
    if (Peek() != '"') return false;
    ++pos_;
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return false;
      char e = s_[pos_++];
      out->push_back(e == 'n' ? '\n' : e);
    }
    return false;
  }

  // `{name="value",...}` (a trailing comma allowed).
  bool Labels(LabelSet* labels, std::string* error) {
    ++pos_;  // '{'
    while (true) {
      SkipSpaces();
      if (Peek() == '}') {
        ++pos_;
        return true;
      }
      std::string_view name;
      if (!Name(false, &name)) return Fail(error, "a label name or '}'");
      SkipSpaces();
      if (Peek() != '=') return Fail(error, "'=' after a label name");
      ++pos_;
      SkipSpaces();
      std::string value;
      if (!QuotedValue(&value)) return Fail(error, "a double-quoted label value");
      if (labels->size() >= kMaxLabels) return Fail(error, "at most 64 labels");
      labels->emplace_back(std::string(name), std::move(value));
      SkipSpaces();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != '}') {
        return Fail(error, "',' or '}' after a label");
      }
    }
  }

  bool Value(double* out) {
    size_t start = pos_;
    while (pos_ < s_.size() && !Space(s_[pos_])) ++pos_;
    std::string token(s_.substr(start, pos_ - start));
    if (token == "NaN") {
      *out = std::numeric_limits<double>::quiet_NaN();
      return true;
    }
    if (token == "+Inf" || token == "Inf") {
      *out = std::numeric_limits<double>::infinity();
      return true;
    }
    if (token == "-Inf") {
      *out = -std::numeric_limits<double>::infinity();
      return true;
    }
    if (token.empty()) return false;
    char* end = nullptr;
    *out = std::strtod(token.c_str(), &end);
    return end == token.c_str() + token.size();
  }

  bool Fail(std::string* error, std::string_view expected) {
    *error = StrCat("column ", pos_ + 1, ": expected ", expected);
    return false;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<ParsedSample>> ParseExposition(
    std::string_view text, const std::function<bool(std::string_view name)>& keep,
    size_t max_samples) {
  std::vector<ParsedSample> out;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    LineParser p(line);
    p.SkipSpaces();
    if (p.AtEnd() || p.Peek() == '#') continue;
    std::string error;
    std::string_view name;
    if (!p.Name(true, &name)) {
      return absl::InvalidArgumentError(StrCat("line ", line_number, ": expected a metric name"));
    }
    if (keep && !keep(name)) continue;
    ParsedSample sample;
    sample.name = std::string(name);
    if (p.Peek() == '{' && !p.Labels(&sample.labels, &error)) {
      return absl::InvalidArgumentError(StrCat("line ", line_number, ": ", error));
    }
    p.SkipSpaces();
    if (!p.Value(&sample.value)) {
      return absl::InvalidArgumentError(
          StrCat("line ", line_number, ": expected a value after ", name));
    }
    std::sort(sample.labels.begin(), sample.labels.end());
    if (out.size() >= max_samples) {
      return absl::ResourceExhaustedError(
          StrCat("more than ", max_samples, " samples (line ", line_number, ")"));
    }
    out.push_back(std::move(sample));
  }
  return out;
}

std::string_view LabelValue(const LabelSet& labels, std::string_view name) {
  for (const auto& [k, v] : labels) {
    if (k == name) return v;
  }
  return {};
}

}  // namespace exa::metrics
