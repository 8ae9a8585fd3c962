// What the spec parsers share (spec.cc, autoscaling_spec.cc): a reader of YAML nodes that names
// file:line:column, the field path, the value and what is allowed in every error. Internal to
// the scheduler_spec target.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "config/schema.h"
#include "yaml-cpp/yaml.h"

namespace exa::scheduler {
struct AutoscalingSpec;
}  // namespace exa::scheduler

namespace exa::scheduler::spec_internal {

// Where a YAML node sits, for error messages ("spec.yaml:7:13").
class Reader {
 public:
  Reader(std::string_view source, int first_line) : source_(source), first_line_(first_line) {}

  absl::Status Error(const YAML::Node& at, std::string_view path, std::string_view what) const {
    return absl::InvalidArgumentError(StrCat(Where(at), ": ", path, " ", what));
  }

  std::string Where(const YAML::Node& at) const {
    YAML::Mark mark = at.Mark();
    if (mark.is_null()) return std::string(source_);
    return StrCat(source_, ":", first_line_ + mark.line + 1, ":", mark.column + 1);
  }

  // A mapping whose keys must all be in `allowed`; an unknown key gets the nearest allowed one.
  absl::Status CheckMap(const YAML::Node& node, std::string_view path,
                        std::initializer_list<std::string_view> allowed) const {
    if (!node.IsMap()) return Error(node, path, "must be a mapping");
    std::set<std::string> seen;
    for (const auto& kv : node) {
      std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      std::string field = path.empty() ? key : StrCat(path, ".", key);
      if (!seen.insert(key).second) return Error(kv.first, field, "appears twice");
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string_view best;
      size_t best_distance = std::numeric_limits<size_t>::max();
      std::string list;
      for (std::string_view a : allowed) {
        StrAppend(&list, list.empty() ? "" : ", ", a);
        size_t d = config::EditDistance(key, a);
        if (d < best_distance) {
          best_distance = d;
          best = a;
        }
      }
      std::string hint = best_distance <= std::max<size_t>(2, key.size() / 3)
                             ? StrCat("did you mean \"", best, "\"? ")
                             : "";
      return absl::InvalidArgumentError(
          StrCat(Where(kv.first), ": unknown field \"", field, "\"; ", hint, "allowed: ", list));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> String(const YAML::Node& node, std::string_view path) const {
    if (!node.IsScalar()) return Error(node, path, "must be a string");
    return node.Scalar();
  }

  absl::StatusOr<int> Int(const YAML::Node& node, std::string_view path, int64_t lo,
                          int64_t hi) const {
    if (!node.IsScalar()) return Error(node, path, "must be an integer");
    const std::string& s = node.Scalar();
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno == ERANGE) {
      return Error(node, path, StrCat("\"", s, "\": expected an integer in [", lo, ", ", hi, "]"));
    }
    if (v < lo || v > hi) {
      return Error(node, path, StrCat(v, ": must be in [", lo, ", ", hi, "]"));
    }
    return static_cast<int>(v);
  }

  absl::StatusOr<bool> Bool(const YAML::Node& node, std::string_view path) const {
    if (node.IsScalar()) {
      const std::string& s = node.Scalar();
      if (s == "true") return true;
      if (s == "false") return false;
      return Error(node, path, StrCat("\"", s, "\": expected true or false"));
    }
    return Error(node, path, "must be true or false");
  }

  absl::StatusOr<uint64_t> Bytes(const YAML::Node& node, std::string_view path) const {
    if (!node.IsScalar()) return Error(node, path, "must be a quantity like 53Gi");
    absl::StatusOr<uint64_t> v = ParseBytes(node.Scalar());
    if (!v.ok()) return Error(node, path, ToStd(v.status().message()));
    return *v;
  }

  absl::StatusOr<absl::Duration> Duration(const YAML::Node& node, std::string_view path) const {
    if (!node.IsScalar()) return Error(node, path, "must be a duration like 30s");
    absl::StatusOr<absl::Duration> v = ParseDuration(node.Scalar());
    if (!v.ok()) return Error(node, path, ToStd(v.status().message()));
    if (*v < absl::ZeroDuration()) return Error(node, path, "must not be negative");
    return *v;
  }

 private:
  std::string_view source_;
  int first_line_;  // of the document within the file, 0-based
};

// spec.autoscaling (autoscaling_spec.cc).
absl::Status ParseAutoscaling(const Reader& r, const YAML::Node& n, AutoscalingSpec& out);
bool LatencyMetric(std::string_view metric);

// A fraction written as a percentage ("10%") or a plain number (0.1).
absl::StatusOr<double> ParseFraction(const Reader& r, const YAML::Node& n, std::string_view path);

}  // namespace exa::scheduler::spec_internal
