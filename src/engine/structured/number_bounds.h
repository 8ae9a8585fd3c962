// Numeric bounds of structured outputs (json_schema.h: minimum, maximum, exclusiveMinimum,
// exclusiveMaximum): whether a number the output has begun can still end within them, so the
// matcher never lets a model start a number it cannot finish.
//
// Numbers under bounds are written in plain decimal (no exponent) with at most
// kBoundedDigits significant digits, kBoundedDigits digits before the point and kBoundedDigits
// after it, and never as negative zero. Within those limits the test below is exact: values are
// fixed point in units of 10^-kBoundedDigits, so no rounding of binary floating point decides
// whether a prefix is allowed. Fifteen significant digits also keep the order: two such decimals
// that differ convert to different doubles, so a client that checks the value as a double agrees.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace exa::engine::structured {

inline constexpr int kBoundedDigits = 15;

// A value in units of 10^-kBoundedDigits.
using Fixed = __int128;

struct NumberBounds {
  Fixed min = 0;  // inclusive, on the grid of values the output can hold
  Fixed max = 0;
};

// A number so far, in the matcher's DFA states (json_matcher.cc: 1 after '-', 2 a leading 0,
// 3 integer digits, 4 after '.', 5 fraction digits).
struct NumberPrefix {
  int state = 0;
  bool integer = false;  // "integer": no fraction
  bool negative = false;
  uint64_t int_value = 0;
  int int_digits = 0;
  uint64_t frac_value = 0;  // the fraction's digits as an integer
  int frac_digits = 0;
};

// Whether some number that begins with `p` lies within `b` (and within the limits above).
bool NumberFeasible(const NumberPrefix& p, const NumberBounds& b);
// Whether `p`, ended here, lies within `b` (its DFA state must accept).
bool NumberWithin(const NumberPrefix& p, const NumberBounds& b);

// The bounds of schema `s` at `path` (minimum, maximum, exclusiveMinimum, exclusiveMaximum, the
// latter as numbers or, as in OpenAPI 3.0, booleans on the others), for a number (`integer`
// false) or an integer; nullopt when it has none. INVALID_ARGUMENT naming the keyword when a
// bound is not a number, or when no number the output can hold satisfies them all.
absl::StatusOr<std::optional<NumberBounds>> ReadNumberBounds(const nlohmann::json& s,
                                                             const std::string& path, bool integer);

}  // namespace exa::engine::structured
