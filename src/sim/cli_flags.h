// The simulators' flag syntax, in one place: "--key=value" or "--key value" (and "-f value").
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/strings.h"

namespace exa::sim {

// `args` as (key, value) pairs, in order; INVALID_ARGUMENT naming a key left without a value.
inline absl::StatusOr<std::vector<std::pair<std::string, std::string>>> SplitFlags(
    const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string key = args[i], value;
    if (size_t eq = key.find('='); eq != std::string::npos && key.starts_with("--")) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(StrCat(key, ": missing value"));
    }
    out.emplace_back(std::move(key), std::move(value));
  }
  return out;
}

}  // namespace exa::sim
