#include "common/units.h"

#include <cmath>
#include <limits>

#include <cctype>
#include "absl/status/status.h"
#include "common/strings.h"

namespace exa {
namespace {

constexpr char kBytesHelp[] =
    "expected a quantity like 53Gi, 500Mi, 1.5G or 4096 (suffixes k M G T P E, Ki Mi Gi Ti Pi Ei)";
constexpr char kDurationHelp[] =
    "expected a duration like 30s, 5m, 24h, 250ms or 1h30m (units ns us ms s m h d)";

struct Suffix {
  std::string_view text;
  long double multiplier;
};

// Longest suffixes first so "Mi" wins over "M".
constexpr Suffix kByteSuffixes[] = {
    {"Ki", 1024.0L},
    {"Mi", 1024.0L * 1024},
    {"Gi", 1024.0L * 1024 * 1024},
    {"Ti", 1024.0L * 1024 * 1024 * 1024},
    {"Pi", 1024.0L * 1024 * 1024 * 1024 * 1024},
    {"Ei", 1024.0L * 1024 * 1024 * 1024 * 1024 * 1024},
    {"k", 1e3L},
    {"K", 1e3L},
    {"M", 1e6L},
    {"G", 1e9L},
    {"T", 1e12L},
    {"P", 1e15L},
    {"E", 1e18L},
};

// Splits "1.5Gi" into number "1.5" and suffix "Gi". Returns false when the number part is not
// digits with at most one dot.
bool SplitNumber(std::string_view text, std::string_view* number, std::string_view* rest) {
  size_t i = 0;
  bool digits = false;
  bool dot = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  *number = text.substr(0, i);
  *rest = text.substr(i);
  return digits;
}

absl::Status BadBytes(std::string_view text, std::string_view why = "") {
  return absl::InvalidArgumentError(
      StrCat("\"", text, "\": ", why.empty() ? "" : StrCat(why, "; "), kBytesHelp));
}

absl::Status BadDuration(std::string_view text, std::string_view why = "") {
  return absl::InvalidArgumentError(
      StrCat("\"", text, "\": ", why.empty() ? "" : StrCat(why, "; "), kDurationHelp));
}

}  // namespace

absl::StatusOr<uint64_t> ParseBytes(std::string_view input) {
  std::string_view text = StripWhitespace(input);
  std::string_view number, suffix;
  if (!SplitNumber(text, &number, &suffix)) return BadBytes(input);
  if (!suffix.empty() && suffix.back() == 'B') suffix.remove_suffix(1);
  long double multiplier = 1;
  if (!suffix.empty()) {
    bool found = false;
    for (const Suffix& s : kByteSuffixes) {
      if (s.text == suffix) {
        multiplier = s.multiplier;
        found = true;
        break;
      }
    }
    if (!found) return BadBytes(input, StrCat("unknown suffix \"", suffix, "\""));
  }
  long double value = std::strtold(std::string(number).c_str(), nullptr) * multiplier;
  if (value > static_cast<long double>(std::numeric_limits<uint64_t>::max())) {
    return BadBytes(input, "larger than 16Ei");
  }
  long double rounded = std::round(value);
  if (std::fabs(value - rounded) > 1e-6L * std::max<long double>(1, value)) {
    return BadBytes(input, "not a whole number of bytes");
  }
  return static_cast<uint64_t>(rounded);
}

absl::StatusOr<absl::Duration> ParseDuration(std::string_view input) {
  std::string_view text = StripWhitespace(input);
  if (text.empty()) return BadDuration(input, "empty");
  if (text == "0") return absl::ZeroDuration();  // zero needs no unit
  absl::Duration total = absl::ZeroDuration();
  while (!text.empty()) {
    std::string_view number, rest;
    if (!SplitNumber(text, &number, &rest)) return BadDuration(input);
    size_t unit_len = 0;
    while (unit_len < rest.size() && std::isalpha(static_cast<unsigned char>(rest[unit_len])))
      ++unit_len;
    std::string_view unit = rest.substr(0, unit_len);
    absl::Duration scale;
    if (unit == "ns") {
      scale = absl::Nanoseconds(1);
    } else if (unit == "us") {
      scale = absl::Microseconds(1);
    } else if (unit == "ms") {
      scale = absl::Milliseconds(1);
    } else if (unit == "s") {
      scale = absl::Seconds(1);
    } else if (unit == "m") {
      scale = absl::Minutes(1);
    } else if (unit == "h") {
      scale = absl::Hours(1);
    } else if (unit == "d") {
      scale = absl::Hours(24);
    } else if (unit.empty()) {
      return BadDuration(input, "missing unit");
    } else {
      return BadDuration(input, StrCat("unknown unit \"", unit, "\""));
    }
    double value = std::strtod(std::string(number).c_str(), nullptr);
    // 100 years is far beyond any timeout or interval; it also keeps int64 nanoseconds safe.
    // The bound is on the sum ("36500d36500d"); absl saturates a product too large to hold.
    total += value * scale;
    if (total > absl::Hours(100 * 365 * 24)) return BadDuration(input, "longer than 100 years");
    text = rest.substr(unit_len);
  }
  return total;
}

std::string BytesToString(uint64_t bytes) {
  static constexpr std::string_view kUnits[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  if (bytes == 0) return "0";
  int exact = 0;
  uint64_t v = bytes;
  while (exact < 6 && v % 1024 == 0) {
    v /= 1024;
    ++exact;
  }
  if (exact > 0 || bytes < 1024) return StrCat(v, kUnits[exact]);
  int unit = 0;
  long double scaled = bytes;
  while (unit < 6 && scaled >= 1024) {
    scaled /= 1024;
    ++unit;
  }
  return fmt::format("{:.2f}{}", static_cast<double>(scaled), kUnits[unit]);
}

std::string DurationToString(absl::Duration d) {
  if (d == absl::ZeroDuration()) return "0s";
  std::string out;
  if (d < absl::ZeroDuration()) {
    out = "-";
    d = -d;
  }
  int64_t ns = absl::ToInt64Nanoseconds(d);
  if (ns % 1000000000 != 0) {
    if (ns % 1000000 == 0) return StrCat(out, ns / 1000000, "ms");
    if (ns % 1000 == 0) return StrCat(out, ns / 1000, "us");
    return StrCat(out, ns, "ns");
  }
  int64_t s = ns / 1000000000;
  int64_t h = s / 3600, m = (s % 3600) / 60, sec = s % 60;
  if (h) StrAppend(&out, h, "h");
  if (m) StrAppend(&out, m, "m");
  if (sec) StrAppend(&out, sec, "s");
  return out;
}

}  // namespace exa
