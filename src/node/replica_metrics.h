// Per-replica load as Prometheus gauges (MISSION.md §10: pending tokens, KV usage, queue and
// latency per replica), refreshed by the daemon's load tick.
//
// Thread safety: Update from one thread at a time; the gauges are read by /metrics any time.
#pragma once

#include <string>
#include <vector>

#include "metrics/registry.h"
#include "node/replica_host.h"

namespace exa::node {

class ReplicaMetrics {
 public:
  ReplicaMetrics(const ReplicaHost& host, metrics::Registry& registry);
  void Update();

 private:
  struct Series {
    metrics::Gauge* pending_tokens;
    metrics::Gauge* running;
    metrics::Gauge* waiting;
    metrics::Gauge* kv_used;
    metrics::Gauge* kv_total;
    metrics::Gauge* ttft_p99;
    metrics::Gauge* itl_p99;
  };
  const ReplicaHost& host_;
  std::vector<Series> series_;  // one per host_.replicas(), same order
};

}  // namespace exa::node
