#include "engine/structured/number_bounds.h"

#include <algorithm>
#include <charconv>
#include <string_view>

#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace exa::engine::structured {
namespace {

using json = nlohmann::json;

constexpr Fixed Pow10(int n) {
  Fixed r = 1;
  for (int i = 0; i < n; ++i) r *= 10;
  return r;
}
constexpr Fixed kUnit = Pow10(kBoundedDigits);           // 1.0
constexpr Fixed kLimit = Pow10(kBoundedDigits) * kUnit;  // 10^15: past every magnitude written

// Whether a multiple of `step` lies in [lo, hi].
bool GridPoint(Fixed lo, Fixed hi, Fixed step) {
  if (lo > hi) return false;
  const Fixed r = lo % step;  // the sign of lo
  const Fixed up = r == 0 ? lo : r > 0 ? lo + (step - r) : lo - r;
  return up <= hi;
}

// Whether some magnitude in [a, b] on multiples of `step` (a and b among them), with the
// prefix's sign, lies within `bounds`. A negative number is never zero.
bool Meets(Fixed a, Fixed b, Fixed step, bool negative, const NumberBounds& bounds) {
  if (negative) {
    if (a == 0) a = step;
    if (a > b) return false;
    const Fixed lo = -b;
    b = -a;
    a = lo;
  }
  return GridPoint(std::max(a, bounds.min), std::min(b, bounds.max), step);
}

// A bound's exact value, truncated towards zero onto the grid; `inexact` when digits past
// kBoundedDigits were dropped. Magnitudes past every number written clamp to ±kLimit.
struct Decimal {
  Fixed value = 0;
  bool inexact = false;
  bool negative = false;
};

absl::StatusOr<Decimal> ReadDecimal(const json& v, const std::string& where) {
  if (!v.is_number()) {
    return absl::InvalidArgumentError(StrCat(where, ": a number, not ", v.dump()));
  }
  Decimal out;
  if (v.is_number_unsigned() || v.is_number_integer()) {
    const bool negative = !v.is_number_unsigned() && v.get<int64_t>() < 0;
    const uint64_t magnitude = v.is_number_unsigned() ? v.get<uint64_t>()
                               : negative             ? 0 - static_cast<uint64_t>(v.get<int64_t>())
                                                      : static_cast<uint64_t>(v.get<int64_t>());
    out.negative = negative;
    out.value = static_cast<Fixed>(magnitude) >= Pow10(kBoundedDigits)
                    ? kLimit
                    : static_cast<Fixed>(magnitude) * kUnit;
    if (negative) out.value = -out.value;
    return out;
  }
  // The shortest text that reads back as this double, without an exponent.
  char buffer[400];
  const auto [end, ec] =
      std::to_chars(buffer, buffer + sizeof(buffer), v.get<double>(), std::chars_format::fixed);
  if (ec != std::errc()) return absl::InvalidArgumentError(StrCat(where, ": out of range"));
  std::string_view text(buffer, static_cast<size_t>(end - buffer));
  out.negative = text.starts_with('-');
  if (out.negative) text.remove_prefix(1);
  const size_t point = std::min(text.find('.'), text.size());
  std::string_view whole = text.substr(0, point);
  while (whole.size() > 1 && whole.front() == '0') whole.remove_prefix(1);
  if (whole.size() > static_cast<size_t>(kBoundedDigits)) {
    out.value = out.negative ? -kLimit : kLimit;
    return out;
  }
  for (char c : whole) out.value = out.value * 10 + (c - '0');
  const std::string_view fraction = point < text.size() ? text.substr(point + 1) : "";
  for (int i = 0; i < kBoundedDigits; ++i) {
    const size_t at = static_cast<size_t>(i);
    out.value = out.value * 10 + (at < fraction.size() ? fraction[at] - '0' : 0);
  }
  out.inexact = fraction.size() > static_cast<size_t>(kBoundedDigits) &&
                fraction.find_first_not_of('0', kBoundedDigits) != std::string_view::npos;
  if (out.negative) out.value = -out.value;
  return out;
}

// The least grid point at or above the bound, and the greatest at or below it.
Fixed Ceil(const Decimal& d) { return d.inexact && !d.negative ? d.value + 1 : d.value; }
Fixed Floor(const Decimal& d) { return d.inexact && d.negative ? d.value - 1 : d.value; }

}  // namespace

bool NumberFeasible(const NumberPrefix& p, const NumberBounds& b) {
  switch (p.state) {
    case 0:
    case 1:  // nothing yet, or '-': a sign, some first digit
      if (p.state == 0) {
        NumberPrefix q = p;
        q.state = 1;
        q.negative = true;
        if (NumberFeasible(q, b)) return true;
      }
      for (uint64_t d = 0; d <= 9; ++d) {
        NumberPrefix q = p;
        q.state = d == 0 ? 2 : 3;
        q.int_value = d;
        q.int_digits = 1;
        if (NumberFeasible(q, b)) return true;
      }
      return false;
    case 2:  // "0", or "0." and fraction digits to come
      return p.integer ? Meets(0, 0, kUnit, p.negative, b) : Meets(0, kUnit - 1, 1, p.negative, b);
    case 3: {  // I: more integer digits, then as many fraction digits as significance allows
      if (p.int_digits > kBoundedDigits) return false;
      const Fixed whole = static_cast<Fixed>(p.int_value);
      for (int j = 0; p.int_digits + j <= kBoundedDigits; ++j) {
        const int fraction = p.integer ? 0 : kBoundedDigits - p.int_digits - j;
        const Fixed step = Pow10(kBoundedDigits - fraction);
        const Fixed lo = whole * Pow10(j) * kUnit;
        const Fixed hi = (whole + 1) * Pow10(j) * kUnit - step;
        if (Meets(lo, hi, step, p.negative, b)) return true;
      }
      return false;
    }
    case 4:
    case 5: {  // I.F: more fraction digits, as significance allows
      const int allowed = p.int_value == 0 ? kBoundedDigits : kBoundedDigits - p.int_digits;
      if (p.frac_digits > allowed || (p.state == 4 && allowed < 1)) return false;
      const Fixed step = Pow10(kBoundedDigits - allowed);
      const Fixed span = Pow10(kBoundedDigits - p.frac_digits);
      const Fixed base =
          static_cast<Fixed>(p.int_value) * kUnit + static_cast<Fixed>(p.frac_value) * span;
      return Meets(base, base + span - step, step, p.negative, b);
    }
    default:  // an exponent: not written under bounds
      return false;
  }
}

bool NumberWithin(const NumberPrefix& p, const NumberBounds& b) {
  const Fixed magnitude = static_cast<Fixed>(p.int_value) * kUnit +
                          static_cast<Fixed>(p.frac_value) * Pow10(kBoundedDigits - p.frac_digits);
  if (p.negative && magnitude == 0) return false;
  const Fixed value = p.negative ? -magnitude : magnitude;
  return value >= b.min && value <= b.max;
}

absl::StatusOr<std::optional<NumberBounds>> ReadNumberBounds(const json& s, const std::string& path,
                                                             bool integer) {
  NumberBounds b{-kLimit, kLimit};
  bool any = false;
  for (const bool lower : {true, false}) {
    const char* inclusive = lower ? "minimum" : "maximum";
    const char* exclusive = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    auto excl = s.find(exclusive);
    // OpenAPI 3.0: a boolean that makes the inclusive bound exclusive.
    const bool flag = excl != s.end() && excl->is_boolean() && excl->get<bool>();
    if (excl != s.end() && excl->is_boolean()) excl = s.end();
    for (const auto& [key, strict] : {std::pair{inclusive, flag}, std::pair{exclusive, true}}) {
      auto it = s.find(key);
      if (it == s.end() || (key == exclusive && excl == s.end())) continue;
      EXA_ASSIGN_OR_RETURN(const Decimal d, ReadDecimal(*it, StrCat(path, ".", key)));
      any = true;
      // On the grid: x > d is x >= Floor(d) + 1, x < d is x <= Ceil(d) - 1.
      if (lower) b.min = std::max(b.min, strict ? Floor(d) + 1 : Ceil(d));
      if (!lower) b.max = std::min(b.max, strict ? Ceil(d) - 1 : Floor(d));
    }
  }
  if (!any) return std::nullopt;
  NumberPrefix start;
  start.integer = integer;
  if (!NumberFeasible(start, b)) {
    return absl::InvalidArgumentError(StrCat(
        path, ": no ", integer ? "integer" : "number",
        " within minimum, maximum, exclusiveMinimum and exclusiveMaximum can be written (at most ",
        kBoundedDigits, " significant digits, and as many before and after the point)"));
  }
  return b;
}

}  // namespace exa::engine::structured
