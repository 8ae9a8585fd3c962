// Version routing (docs/architecture.md#routing): a request carrying a routed header goes to
// replicas whose label equals the header's value; a request without it goes to the route's default
// value (or anywhere when the route has none). Routes persist in a JSON file in the data dir until
// the scheduler's spec store takes them over.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace exa::gateway {

struct VersionRoute {
  std::string header;  // lower case, e.g. "x-model-version"
  std::string label = "version";
  std::string default_value;  // empty: requests without the header may go anywhere
  bool operator==(const VersionRoute&) const = default;
};

class VersionRoutes {
 public:
  static constexpr size_t kMaxRoutes = 16;

  // `path` may be empty (not persisted). Without a file: the default route, x-model-version →
  // label "version".
  explicit VersionRoutes(std::string path) : path_(std::move(path)) {}
  absl::Status Load();

  // Adds or replaces the route for route.header. INVALID_ARGUMENT names a bad field.
  absl::Status Set(VersionRoute route);
  absl::Status Remove(std::string_view header);
  // Replaces every route with `routes` (the spec store's, on a gateway of a cluster with
  // schedulers); nothing changes unless all are valid.
  absl::Status ReplaceAll(const std::vector<VersionRoute>& routes);
  std::vector<VersionRoute> List() const;
  // Header names to extract from requests (lower case).
  std::vector<std::string> Headers() const;

  // The labels a request must match, given its routed headers (lower-case name → value).
  std::map<std::string, std::string> Labels(
      const std::map<std::string, std::string>& headers) const;

 private:
  absl::Status SaveLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  std::vector<VersionRoute> routes_ ABSL_GUARDED_BY(mu_);
};

// A route with its header and label normalized; INVALID_ARGUMENT names a bad field.
absl::StatusOr<VersionRoute> NormalizeRoute(VersionRoute route);

// Validates a header name or label key: [a-z0-9._-], 1..64 characters after lower-casing.
absl::StatusOr<std::string> NormalizeName(std::string_view field, std::string_view value);

}  // namespace exa::gateway
