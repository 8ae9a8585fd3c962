#include "node/replica_metrics.h"

#include <algorithm>
#include <set>

namespace exa::node {

ReplicaMetrics::ReplicaMetrics(const ReplicaHost& host, metrics::Registry& r, int gpu_count,
                               uint64_t host_memory_budget_bytes)
    : host_(host), registry_(r) {
  std::vector<std::string> labels = {"replica", "model"};
  pending_ = &r.AddGauge("exaserve_replica_pending_tokens",
                         "Prompt tokens not yet prefilled plus expected decode tokens.", labels);
  running_ = &r.AddGauge("exaserve_replica_running_sequences", "Sequences in the batch.", labels);
  waiting_ = &r.AddGauge("exaserve_replica_waiting_sequences",
                         "Sequences admitted but not running (queued or preempted).", labels);
  kv_used_ = &r.AddGauge("exaserve_replica_kv_blocks_used",
                         "KV cache blocks referenced by a sequence.", labels);
  kv_total_ =
      &r.AddGauge("exaserve_replica_kv_blocks_capacity", "KV cache blocks reserved.", labels);
  ttft_ = &r.AddGauge("exaserve_replica_ttft_p99_seconds",
                      "Recent time to first token, 99th percentile.", labels);
  itl_ = &r.AddGauge("exaserve_replica_inter_token_p99_seconds",
                     "Recent inter-token latency, 99th percentile.", labels);
  errors_ = &r.AddGauge("exaserve_replica_error_ratio",
                        "Of the replica's last requests that ended (up to 256, cancellations "
                        "apart), the fraction that ended in an engine error.",
                        labels);
  memory_ = &r.AddGauge("exaserve_replica_memory_bytes",
                        "Memory the replica holds of its own: KV cache, buffers, its device "
                        "pool (the weights, shared between a model's replicas, apart).",
                        labels);
  kv_cached_ =
      &r.AddGauge("exaserve_replica_kv_blocks_cached",
                  "KV cache blocks published for prefix reuse (referenced or not).", labels);
  prefix_hit_ = &r.AddCounter("exaserve_replica_prefix_hit_tokens_total",
                              "Prompt tokens taken from the prefix cache at admission.", labels);
  prefix_miss_ =
      &r.AddCounter("exaserve_replica_prefix_miss_tokens_total",
                    "Prompt tokens computed at admission (not in the prefix cache).", labels);
  evictions_ = &r.AddCounter("exaserve_replica_kv_evictions_total",
                             "Cached KV blocks evicted to make room.", labels);
  load_seconds_ = &r.AddGauge(
      "exaserve_replica_weight_load_seconds",
      "Time to bring the replica's weights onto its device at start (cuda: host to GPU through "
      "pinned staging; 0 when shared with a replica already loaded, or on the CPU).",
      labels);
  state_ = &r.AddGauge("exaserve_replicas",
                       "Replicas on this node by state (pending, loading, warming, ready, "
                       "draining, stopped, failed; stopped and failed: the recent ones).",
                       {"state"});
  if (gpu_count > 0) {
    auto& used = r.AddGauge("exaserve_gpu_memory_used_bytes",
                            "GPU memory promised to replicas by the node's memory ledger (shared "
                            "weights, KV caches, runtime).",
                            {"device"});
    auto& total = r.AddGauge("exaserve_gpu_memory_total_bytes",
                             "GPU memory replicas may be promised: the device's memory times "
                             "inference.gpu_memory_utilization.",
                             {"device"});
    for (int i = 0; i < gpu_count; ++i) {
      const std::string device = std::to_string(i);
      gpu_memory_.emplace_back(&used.WithLabels({device}), &total.WithLabels({device}));
    }
  }
  if (host_memory_budget_bytes > 0) {
    r.SimpleGauge("exaserve_host_memory_budget_bytes",
                  "inference.host_memory_budget: the host memory CPU replicas may be promised.")
        .Set(static_cast<double>(host_memory_budget_bytes));
  }
  Update();
}

ReplicaMetrics::Series& ReplicaMetrics::SeriesFor(const ReplicaView& replica) {
  auto it = series_.find(replica.id);
  if (it != series_.end()) return it->second;
  std::vector<std::string> v = {replica.id, replica.model};
  load_seconds_->WithLabels(v).Set(replica.engine->info().weight_load_seconds);
  Series s{&pending_->WithLabels(v),   &running_->WithLabels(v),    &waiting_->WithLabels(v),
           &kv_used_->WithLabels(v),   &kv_total_->WithLabels(v),   &ttft_->WithLabels(v),
           &itl_->WithLabels(v),       &errors_->WithLabels(v),     &memory_->WithLabels(v),
           &kv_cached_->WithLabels(v), &prefix_hit_->WithLabels(v), &prefix_miss_->WithLabels(v),
           &evictions_->WithLabels(v)};
  return series_.emplace(replica.id, s).first->second;
}

void ReplicaMetrics::UpdateDeviceMemory() {
  const absl::Time now = absl::Now();
  if (!device_reader_ || now - device_read_at_ < absl::Seconds(1)) return;
  device_read_at_ = now;
  absl::StatusOr<std::vector<DeviceMemory>> read = device_reader_();
  if (!read.ok() || read->empty()) return;  // no NVML: the alert keeps the ledger's series
  if (device_used_ == nullptr) {
    device_used_ = &registry_.AddGauge(
        "exaserve_gpu_device_memory_used_bytes",
        "GPU memory in use as the device reports it (NVML: every process's, not only promised).",
        {"device"});
    device_total_ = &registry_.AddGauge("exaserve_gpu_device_memory_total_bytes",
                                        "GPU memory the device has (NVML).", {"device"});
  }
  for (const DeviceMemory& d : *read) {
    const std::string device = std::to_string(d.device);
    device_used_->WithLabels({device}).Set(static_cast<double>(d.used_bytes));
    device_total_->WithLabels({device}).Set(static_cast<double>(d.total_bytes));
  }
}

void ReplicaMetrics::Update() {
  UpdateDeviceMemory();
  std::map<std::string, int> states;
  for (const char* s :
       {"pending", "loading", "warming", "ready", "draining", "stopped", "failed"}) {
    states[s] = 0;
  }
  std::set<std::string> loaded;
  for (const ReplicaView& v : host_.Views()) {
    states[v.state]++;
    // Ready and draining replicas (the latter finishing their requests) report their load.
    if (v.engine == nullptr || (v.state != "ready" && v.state != "draining")) continue;
    loaded.insert(v.id);
    engine::EngineLoad load = v.engine->Load();
    Series& s = SeriesFor(v);
    s.pending_tokens->Set(static_cast<double>(load.pending_tokens));
    s.running->Set(load.running);
    s.waiting->Set(load.waiting);
    s.kv_used->Set(load.kv_blocks_used);
    s.kv_total->Set(load.kv_blocks_total);
    s.ttft_p99->Set(load.ttft_p99_ms / 1000.0);
    s.itl_p99->Set(load.itl_p99_ms / 1000.0);
    s.error_ratio->Set(load.error_rate);
    s.memory->Set(static_cast<double>(load.memory_bytes));
    s.kv_cached->Set(load.kv_blocks_cached);
    s.prefix_hit->Increment(
        static_cast<double>(std::max<int64_t>(0, load.prefix_hit_tokens - s.seen_hit)));
    s.prefix_miss->Increment(
        static_cast<double>(std::max<int64_t>(0, load.prefix_miss_tokens - s.seen_miss)));
    if (load.kv_evictions > s.seen_evictions) {
      s.evictions->Increment(static_cast<double>(load.kv_evictions - s.seen_evictions));
    }
    // A restarted replica (a new engine under the same id) counts from zero again.
    s.seen_hit = load.prefix_hit_tokens;
    s.seen_miss = load.prefix_miss_tokens;
    s.seen_evictions = load.kv_evictions;
  }
  for (const auto& [state, n] : states) state_->WithLabels({state}).Set(n);
  for (size_t i = 0; i < gpu_memory_.size(); ++i) {
    auto [used, capacity] = host_.LedgerUsage(static_cast<int>(i));
    gpu_memory_[i].first->Set(static_cast<double>(used));
    gpu_memory_[i].second->Set(static_cast<double>(capacity));
  }
  // A stopped replica holds nothing: its series read 0, not the last value they had.
  for (auto& [id, s] : series_) {
    if (loaded.count(id) > 0) continue;
    s.seen_hit = s.seen_miss = 0;
    s.seen_evictions = 0;
    for (metrics::Gauge* g :
         {s.pending_tokens, s.running, s.waiting, s.kv_used, s.memory, s.kv_cached}) {
      g->Set(0);
    }
  }
}

}  // namespace exa::node
