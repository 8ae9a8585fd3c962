// Per-replica load as Prometheus gauges (docs/architecture.md#monitoring-and-alerts: pending
// tokens, KV usage, queue and latency per replica) and replica states (exaserve_replicas{state}),
// refreshed by the daemon's load tick; replicas started later get their series on their first tick.
// Memory for the memory alert (docs/architecture.md#monitoring-and-alerts): on GPU nodes each GPU's
// ledger, promised against what replicas may be promised
// (exaserve_gpu_memory_{used,total}_bytes{device}); on CPU nodes the host memory budget
// (exaserve_host_memory_budget_bytes), which alerts compare with the process's RSS. With a device
// reader (NVML), also each GPU's memory as the device reports it. Prefix caching
// (docs/architecture.md#prefix-cache): cached blocks, prompt tokens hit and computed, evictions.
//
// Thread safety: Update from one thread at a time; the gauges are read by /metrics any time.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "metrics/registry.h"
#include "node/replica_host.h"

namespace exa::node {

class ReplicaMetrics {
 public:
  // `gpu_count` GPUs get memory series; a `host_memory_budget_bytes` above 0 is exported.
  ReplicaMetrics(const ReplicaHost& host, metrics::Registry& registry, int gpu_count = 0,
                 uint64_t host_memory_budget_bytes = 0);
  void Update();
  // GPU memory as the device reports it (NVML: every process's use): exported as
  // exaserve_gpu_device_memory_{used,total}_bytes{device} from the first successful read, read
  // at most once a second by Update. The GPU-memory alert prefers these to the ledger's series.
  struct DeviceMemory {
    int device = 0;
    int64_t used_bytes = 0;
    int64_t total_bytes = 0;
  };
  using DeviceMemoryReader = std::function<absl::StatusOr<std::vector<DeviceMemory>>()>;
  void SetDeviceMemoryReader(DeviceMemoryReader reader) { device_reader_ = std::move(reader); }

 private:
  struct Series {
    metrics::Gauge* pending_tokens;
    metrics::Gauge* running;
    metrics::Gauge* waiting;
    metrics::Gauge* kv_used;
    metrics::Gauge* kv_total;
    metrics::Gauge* ttft_p99;
    metrics::Gauge* itl_p99;
    metrics::Gauge* error_ratio;
    metrics::Gauge* memory;
    metrics::Gauge* kv_cached;
    // Prefix caching: cumulative engine counts, added to the counters as they grow.
    metrics::Counter* prefix_hit;
    metrics::Counter* prefix_miss;
    metrics::Counter* evictions;
    int64_t seen_hit = 0, seen_miss = 0;
    uint64_t seen_evictions = 0;
  };
  Series& SeriesFor(const ReplicaView& replica);

  void UpdateDeviceMemory();

  const ReplicaHost& host_;
  DeviceMemoryReader device_reader_;
  absl::Time device_read_at_ = absl::InfinitePast();
  metrics::Registry& registry_;
  metrics::Family<metrics::Gauge>* device_used_ = nullptr;
  metrics::Family<metrics::Gauge>* device_total_ = nullptr;
  metrics::Family<metrics::Gauge>* pending_ = nullptr;
  metrics::Family<metrics::Gauge>* running_ = nullptr;
  metrics::Family<metrics::Gauge>* waiting_ = nullptr;
  metrics::Family<metrics::Gauge>* kv_used_ = nullptr;
  metrics::Family<metrics::Gauge>* kv_total_ = nullptr;
  metrics::Family<metrics::Gauge>* memory_ = nullptr;
  metrics::Family<metrics::Gauge>* ttft_ = nullptr;
  metrics::Family<metrics::Gauge>* errors_ = nullptr;
  metrics::Family<metrics::Gauge>* itl_ = nullptr;
  metrics::Family<metrics::Gauge>* kv_cached_ = nullptr;
  metrics::Family<metrics::Counter>* prefix_hit_ = nullptr;
  metrics::Family<metrics::Counter>* prefix_miss_ = nullptr;
  metrics::Family<metrics::Counter>* evictions_ = nullptr;
  metrics::Family<metrics::Gauge>* load_seconds_ = nullptr;
  metrics::Family<metrics::Gauge>* state_ = nullptr;
  std::map<std::string, Series> series_;  // by replica id; a replica's series outlive it
  std::vector<std::pair<metrics::Gauge*, metrics::Gauge*>> gpu_memory_;  // used, total per GPU
};

}  // namespace exa::node
