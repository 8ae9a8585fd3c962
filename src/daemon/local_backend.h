// Connects the gateway to replicas hosted in this process (the single-machine default and any
// node that runs both roles). A remote backend over Node.Generate takes the same interface.
//
// Thread safety: every method may be called from any thread once the host has started.
#pragma once

#include <atomic>

#include "gateway/frontend.h"
#include "node/replica_host.h"
#include "router/replica_table.h"

namespace exa::daemon {

class LocalReplicaBackend final : public gateway::ReplicaBackend {
 public:
  explicit LocalReplicaBackend(const node::ReplicaHost& host) : host_(host) {}

  std::vector<gateway::ModelView> Models() const override {
    std::vector<gateway::ModelView> out;
    for (const node::ServedModel* m : host_.models()) {
      out.push_back({m->name, m->version, m->tokenizer, m->info.max_context});
    }
    return out;
  }
  absl::StatusOr<engine::RequestId> Submit(const std::string& replica_id,
                                           engine::GenerateRequest request) override {
    engine::Engine* e = host_.FindEngine(replica_id);
    if (e == nullptr) return absl::UnavailableError("replica " + replica_id + " is gone");
    return e->Submit(std::move(request));
  }
  void Cancel(const std::string& replica_id, engine::RequestId id) override {
    if (engine::Engine* e = host_.FindEngine(replica_id)) e->Cancel(id);
  }

  // Registers every local replica in the table.
  void Register(router::ReplicaTable& table) const {
    for (const auto& r : host_.replicas()) {
      table.Upsert({r->id, r->model->name, r->model->version, host_.LabelsOf(r->id)});
    }
  }
  // Copies each replica's load into the table: what the load stream does across nodes.
  void ReportLoad(router::ReplicaTable& table, bool ready) const {
    // Labels changed (exaserve-cli replica label): the router re-reads them.
    if (uint64_t v = host_.labels_version(); v != registered_labels_.exchange(v)) Register(table);
    for (const auto& r : host_.replicas()) {
      engine::EngineLoad load = r->engine->Load();
      table.Report(r->id, {load.pending_tokens, load.running + load.waiting, ready, load.waiting,
                           load.ttft_p99_ms, load.itl_p99_ms});
    }
  }

 private:
  const node::ReplicaHost& host_;
  mutable std::atomic<uint64_t> registered_labels_{0};  // Register at start saw version 0
};

}  // namespace exa::daemon
