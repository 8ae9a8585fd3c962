#include "gateway/version_routes.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/chars.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace exa::gateway {

using nlohmann::json;

absl::StatusOr<std::string> NormalizeName(std::string_view field, std::string_view value) {
  std::string out;
  for (char c : value) {
    char l = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '-' || l == '_' || l == '.';
    if (!ok) {
      return absl::InvalidArgumentError(
          StrCat(field, ": \"", value, "\" has '", std::string(1, c), "'; allowed: a-z 0-9 . _ -"));
    }
    out.push_back(l);
  }
  if (out.empty() || out.size() > 64) {
    return absl::InvalidArgumentError(StrCat(field, ": must be 1 to 64 characters"));
  }
  return out;
}

absl::Status VersionRoutes::Load() {
  if (path_.empty() || !std::filesystem::exists(path_)) {
    // Out of the box, x-model-version picks the replicas' version label (their model version
    // unless relabelled); `exaserve-cli gateway route` replaces or removes it.
    absl::MutexLock lock(&mu_);
    routes_ = {VersionRoute{"x-model-version", "version", ""}};
    return absl::OkStatus();
  }
  // A route is a few dozen bytes and there are a handful: 1 MiB is far past any real file.
  constexpr size_t kMaxRoutesFileBytes = size_t{1} << 20;
  EXA_ASSIGN_OR_RETURN(std::string text, ReadFile(path_, kMaxRoutesFileBytes));
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_array()) {
    return absl::InvalidArgumentError(StrCat(path_, ": not a JSON array of routes"));
  }
  for (const json& r : doc) {
    if (!r.is_object() || !r.contains("header") || !r["header"].is_string()) {
      return absl::InvalidArgumentError(StrCat(path_, ": a route without a \"header\" string"));
    }
    VersionRoute route;
    route.header = r["header"].get<std::string>();
    route.label = r.value("label", std::string("version"));
    route.default_value = r.value("default_value", std::string());
    if (absl::Status s = Set(route); !s.ok()) {
      return absl::InvalidArgumentError(StrCat(path_, ": ", ToStd(s.message())));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<VersionRoute> NormalizeRoute(VersionRoute route) {
  EXA_ASSIGN_OR_RETURN(route.header, NormalizeName("header", route.header));
  if (route.label.empty()) route.label = "version";
  EXA_ASSIGN_OR_RETURN(route.label, NormalizeName("label", route.label));
  if (route.default_value.size() > 128 || HasAsciiControl(route.default_value)) {
    // As a label value (cluster::ValidateLabels): the default names replicas by their label.
    return absl::InvalidArgumentError(
        "default_value: at most 128 printable characters, as a label value");
  }
  return route;
}

absl::Status VersionRoutes::ReplaceAll(const std::vector<VersionRoute>& routes) {
  if (routes.size() > kMaxRoutes) {
    return absl::ResourceExhaustedError(StrCat("at most ", kMaxRoutes, " version routes"));
  }
  std::vector<VersionRoute> normalized;
  for (const VersionRoute& r : routes) {
    EXA_ASSIGN_OR_RETURN(VersionRoute n, NormalizeRoute(r));
    normalized.push_back(std::move(n));
  }
  absl::MutexLock lock(&mu_);
  if (normalized == routes_) return absl::OkStatus();
  routes_ = std::move(normalized);
  return SaveLocked();
}

absl::Status VersionRoutes::Set(VersionRoute route) {
  EXA_ASSIGN_OR_RETURN(route, NormalizeRoute(std::move(route)));
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(routes_.begin(), routes_.end(),
                         [&](const VersionRoute& r) { return r.header == route.header; });
  if (it != routes_.end()) {
    if (*it == route) return absl::OkStatus();
    *it = route;
  } else {
    if (routes_.size() >= kMaxRoutes) {
      return absl::ResourceExhaustedError(StrCat("at most ", kMaxRoutes, " version routes"));
    }
    routes_.push_back(route);
  }
  return SaveLocked();
}

absl::Status VersionRoutes::Remove(std::string_view header) {
  EXA_ASSIGN_OR_RETURN(std::string name, NormalizeName("header", header));
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(routes_.begin(), routes_.end(),
                         [&](const VersionRoute& r) { return r.header == name; });
  if (it == routes_.end()) {
    return absl::NotFoundError(StrCat("header: no route for \"", name, "\""));
  }
  routes_.erase(it);
  return SaveLocked();
}

std::vector<VersionRoute> VersionRoutes::List() const {
  absl::MutexLock lock(&mu_);
  return routes_;
}

std::vector<std::string> VersionRoutes::Headers() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const VersionRoute& r : routes_) out.push_back(r.header);
  return out;
}

std::map<std::string, std::string> VersionRoutes::Labels(
    const std::map<std::string, std::string>& headers) const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::string> labels;
  for (const VersionRoute& r : routes_) {
    auto it = headers.find(r.header);
    if (it != headers.end() && !it->second.empty()) {
      labels[r.label] = it->second;
    } else if (!r.default_value.empty()) {
      labels[r.label] = r.default_value;
    }
  }
  return labels;
}

absl::Status VersionRoutes::SaveLocked() const {
  if (path_.empty()) return absl::OkStatus();
  json doc = json::array();
  for (const VersionRoute& r : routes_) {
    doc.push_back({{"header", r.header}, {"label", r.label}, {"default_value", r.default_value}});
  }
  // Write-then-rename: a crash leaves the old file or the new one, never half of one.
  if (absl::Status st = WriteFileAtomically(path_, doc.dump(2) + "\n"); !st.ok()) {
    return absl::InternalError(StrCat("cannot save version routes: ", ToStd(st.message())));
  }
  return absl::OkStatus();
}

}  // namespace exa::gateway
