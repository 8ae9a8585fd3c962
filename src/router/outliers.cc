#include "router/outliers.h"

#include <algorithm>
#include <map>

namespace exa::router {

std::vector<Outlier> SlowOutliers(const std::vector<ReplicaSnapshot>& replicas,
                                  const OutlierOptions& options) {
  std::map<std::string, std::vector<const ReplicaSnapshot*>> by_model;
  for (const ReplicaSnapshot& r : replicas) {
    if (r.report.itl_p99_ms > 0) by_model[r.info.model].push_back(&r);
  }
  std::vector<Outlier> out;
  for (const auto& [model, group] : by_model) {
    if (static_cast<int>(group.size()) < options.min_peers) continue;
    std::vector<double> p99;
    for (const ReplicaSnapshot* r : group) p99.push_back(r->report.itl_p99_ms);
    std::sort(p99.begin(), p99.end());
    size_t n = p99.size();
    double median = n % 2 == 1 ? p99[n / 2] : (p99[n / 2 - 1] + p99[n / 2]) / 2;
    for (const ReplicaSnapshot* r : group) {
      if (r->report.itl_p99_ms > options.factor * median) {
        out.push_back({r->info.id, r->report.itl_p99_ms, median});
      }
    }
  }
  return out;
}

}  // namespace exa::router
