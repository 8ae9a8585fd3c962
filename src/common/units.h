// Quantities and durations as operators write them in specs, config and flags.
//
//   ParseBytes("53Gi")  -> 56908316672   (binary suffixes Ki Mi Gi Ti Pi Ei)
//   ParseBytes("1.5G")  -> 1500000000    (decimal suffixes k K M G T P E; optional trailing B)
//   ParseDuration("5m") -> 5 minutes     (units ns us ms s m h d, combinable: "1h30m")
//
// Errors name the value and say what is allowed; callers prefix the field path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace exa {

absl::StatusOr<uint64_t> ParseBytes(std::string_view text);
absl::StatusOr<absl::Duration> ParseDuration(std::string_view text);

// Shortest exact binary form when one exists ("53Gi", "512Mi", "1000"), else two decimals of
// the largest binary unit below the value ("1.50Gi").
std::string BytesToString(uint64_t bytes);
// "30s", "5m", "1h30m", "250ms"; zero is "0s".
std::string DurationToString(absl::Duration d);

}  // namespace exa
