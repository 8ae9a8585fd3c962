// Connects the gateway to replicas hosted in this process (the single-machine default and any
// node that runs both roles). A remote backend over Node.Generate takes the same interface.
//
// Thread safety: every method may be called from any thread once the host has started.
#pragma once

#include <atomic>
#include <map>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "engine/prefix_journal.h"
#include "gateway/frontend.h"
#include "node/replica_host.h"
#include "router/prefix_index.h"
#include "router/replica_table.h"

namespace exa::daemon {

class LocalReplicaBackend final : public gateway::ReplicaBackend {
 public:
  // `index` (may be null; it must outlive this) learns what the local replicas cache.
  LocalReplicaBackend(const node::ReplicaHost& host, router::PrefixIndex* index)
      : host_(host), index_(index) {}

  std::vector<gateway::ModelView> Models() const override {
    std::vector<gateway::ModelView> out;
    for (const node::ServedModel* m : host_.models()) {
      out.push_back({m->name, m->version, m->tokenizer, m->info.max_context});
    }
    return out;
  }
  absl::StatusOr<engine::RequestId> Submit(const std::string& replica_id,
                                           engine::GenerateRequest request) override {
    std::shared_ptr<engine::Engine> e = host_.FindEngine(replica_id);
    if (e == nullptr) return absl::UnavailableError("replica " + replica_id + " is gone");
    return e->Submit(std::move(request));
  }
  void Cancel(const std::string& replica_id, engine::RequestId id) override {
    if (std::shared_ptr<engine::Engine> e = host_.FindEngine(replica_id)) e->Cancel(id);
  }

  // Makes the table's local replicas the host's serving set: new ones in, stopped ones out.
  void Register(router::ReplicaTable& table) const {
    std::set<std::string> now;
    for (const auto& r : host_.replicas()) {
      now.insert(r->id);
      table.Upsert({r->id, r->model->name, r->model->version, host_.LabelsOf(r->id)});
    }
    absl::MutexLock lock(&mu_);
    for (const std::string& id : registered_) {
      if (now.count(id) == 0) table.Remove(id);
    }
    registered_ = std::move(now);
  }
  // Copies each replica's load into the table, and what its prefix cache stored and evicted into
  // the index: what the load stream does across nodes.
  void ReportLoad(router::ReplicaTable& table, bool ready) const {
    // Labels changed (exaserve-cli replica label) or replicas started or stopped: the router
    // re-reads them.
    const uint64_t labels = host_.labels_version(), serving = host_.serving_version();
    const bool labels_changed = labels != registered_labels_.exchange(labels);
    const bool serving_changed = serving != registered_serving_.exchange(serving);
    if (labels_changed || serving_changed) Register(table);
    for (const auto& r : host_.replicas()) {
      engine::EngineLoad load = r->engine->Load();
      // The router avoids replicas with requests blocked for a slot, not those whose admission
      // queue merely holds this step's arrivals.
      table.Report(r->id, {load.pending_tokens, load.running + load.waiting, ready, load.blocked,
                           load.ttft_p99_ms, load.itl_p99_ms, load.max_running});
    }
    if (index_ != nullptr) FeedIndex(*index_);
  }

 private:
  // The journals' news since the last call (node_service.h's per-report bound), and stopped
  // replicas out.
  void FeedIndex(router::PrefixIndex& index) const {
    absl::MutexLock lock(&mu_);
    std::set<std::string> present;
    for (const auto& r : host_.replicas()) {
      present.insert(r->id);
      const engine::PrefixJournal* journal = r->engine->prefix_journal();
      if (journal == nullptr) continue;
      JournalCursor& c = cursors_[r->id];  // epoch 0 at first: the journal sends a snapshot
      PrefixCacheDelta d = journal->Since(c.epoch, c.seq, kMaxEventsPerReport);
      if (d.empty()) continue;
      c = {d.epoch, d.to};
      index.Apply(r->id, d);
    }
    for (auto it = cursors_.begin(); it != cursors_.end();) {
      if (present.count(it->first) != 0) {
        ++it;
        continue;
      }
      index.Remove(it->first);
      it = cursors_.erase(it);
    }
  }

  static constexpr size_t kMaxEventsPerReport = 4096;
  struct JournalCursor {
    uint64_t epoch = 0, seq = 0;
  };

  const node::ReplicaHost& host_;
  router::PrefixIndex* const index_;
  mutable std::atomic<uint64_t> registered_labels_{0};  // Register at start saw version 0
  mutable std::atomic<uint64_t> registered_serving_{0};
  mutable absl::Mutex mu_;
  mutable std::set<std::string> registered_ ABSL_GUARDED_BY(mu_);  // ids in the table
  mutable std::map<std::string, JournalCursor> cursors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exa::daemon
