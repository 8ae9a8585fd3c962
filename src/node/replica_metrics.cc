#include "node/replica_metrics.h"

namespace exa::node {

ReplicaMetrics::ReplicaMetrics(const ReplicaHost& host, metrics::Registry& r) : host_(host) {
  std::vector<std::string> labels = {"replica", "model"};
  auto& pending =
      r.AddGauge("exaserve_replica_pending_tokens",
                 "Prompt tokens not yet prefilled plus expected decode tokens.", labels);
  auto& running =
      r.AddGauge("exaserve_replica_running_sequences", "Sequences in the batch.", labels);
  auto& waiting = r.AddGauge("exaserve_replica_waiting_sequences",
                             "Sequences admitted but not running (queued or preempted).", labels);
  auto& kv_used = r.AddGauge("exaserve_replica_kv_blocks_used", "KV cache blocks in use.", labels);
  auto& kv_total =
      r.AddGauge("exaserve_replica_kv_blocks_capacity", "KV cache blocks reserved.", labels);
  auto& ttft = r.AddGauge("exaserve_replica_ttft_p99_seconds",
                          "Recent time to first token, 99th percentile.", labels);
  auto& itl = r.AddGauge("exaserve_replica_inter_token_p99_seconds",
                         "Recent inter-token latency, 99th percentile.", labels);
  auto& load_seconds = r.AddGauge(
      "exaserve_replica_weight_load_seconds",
      "Time to bring the replica's weights onto its device at start (cuda: host to GPU through "
      "pinned staging; 0 when shared with a replica already loaded, or on the CPU).",
      labels);
  for (const auto& replica : host_.replicas()) {
    std::vector<std::string> v = {replica->id, replica->model->name};
    load_seconds.WithLabels(v).Set(replica->engine->info().weight_load_seconds);
    series_.push_back({&pending.WithLabels(v), &running.WithLabels(v), &waiting.WithLabels(v),
                       &kv_used.WithLabels(v), &kv_total.WithLabels(v), &ttft.WithLabels(v),
                       &itl.WithLabels(v)});
  }
}

void ReplicaMetrics::Update() {
  const auto& replicas = host_.replicas();
  for (size_t i = 0; i < replicas.size() && i < series_.size(); ++i) {
    engine::EngineLoad load = replicas[i]->engine->Load();
    Series& s = series_[i];
    s.pending_tokens->Set(static_cast<double>(load.pending_tokens));
    s.running->Set(load.running);
    s.waiting->Set(load.waiting);
    s.kv_used->Set(load.kv_blocks_used);
    s.kv_total->Set(load.kv_blocks_total);
    s.ttft_p99->Set(load.ttft_p99_ms / 1000.0);
    s.itl_p99->Set(load.itl_p99_ms / 1000.0);
  }
}

}  // namespace exa::node
