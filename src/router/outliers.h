// The performance level of health checking (docs/architecture.md#health-checks): among the replicas
// of one model, a replica whose inter-token P99 is more than `factor` × the model's median is an
// outlier — slow hardware, a noisy neighbour, thermal throttling — and leaves routing until it
// recovers. Pure: the caller supplies the snapshots and applies the verdict.
#pragma once

#include <string>
#include <vector>

#include "router/replica_table.h"

namespace exa::router {

struct OutlierOptions {
  double factor = 1.5;
  int min_peers = 3;  // replicas of the model with a measurement, outlier included
};

struct Outlier {
  std::string id;
  double itl_p99_ms = 0;
  double model_median_ms = 0;
};

// Outliers among `replicas`, by model. Replicas without a measurement (0) are not judged and do
// not count as peers.
std::vector<Outlier> SlowOutliers(const std::vector<ReplicaSnapshot>& replicas,
                                  const OutlierOptions& options);

}  // namespace exa::router
