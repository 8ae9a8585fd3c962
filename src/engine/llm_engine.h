// The threaded Engine: an admission queue in front of an EngineCore driven by a dedicated engine
// thread in real time. Used for every backend (cpu; sim with real sleeps).
//
// Threading: see engine.h. Submit validates and pushes to a BoundedQueue (bumping atomic counts
// of queued work); Cancel adds to a mutex-guarded set; the engine thread owns the core
// and publishes a load snapshot under load_mu_ after every step.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/bounded_queue.h"
#include "engine/engine.h"
#include "engine/engine_core.h"
#include "engine/prefix_journal.h"

namespace exa::engine {

class LlmEngine final : public Engine {
 public:
  LlmEngine(const EngineOptions& options, EngineInfo info, std::unique_ptr<StepExecutor> executor,
            std::shared_ptr<const Detokenizer> detokenizer);
  ~LlmEngine() override;

  absl::StatusOr<RequestId> Submit(GenerateRequest request) override;
  void Cancel(RequestId id) override;
  EngineLoad Load() const override;
  const EngineInfo& info() const override { return core_.info(); }
  void Stop() override;
  const PrefixJournal* prefix_journal() const override { return &journal_; }

 private:
  void Loop();
  void Admit(std::unique_ptr<Sequence> seq);
  void DrainAdmissions();
  void ApplyCancels();
  void PublishLoad();

  EngineCore core_;  // engine thread only
  BoundedQueue<std::unique_ptr<Sequence>> queue_;
  std::atomic<RequestId> next_id_{1};
  // Requests still in the admission queue: their prompt tokens and their decode caps (remaining
  // max_tokens bounded by the context). Load() turns the count into a decode estimate with the
  // published history mean.
  std::atomic<int64_t> queued_prompt_tokens_{0};
  std::atomic<int64_t> queued_decode_caps_{0};
  std::atomic<bool> stopping_{false};
  // Requests accepted and not yet finished (queued, admitted or running): exact at any moment,
  // unlike the load snapshot, so a drain never mistakes a request in hand-over for idle.
  std::atomic<int64_t> in_flight_{0};

  absl::Mutex cancel_mu_;
  absl::flat_hash_set<RequestId> cancelled_ ABSL_GUARDED_BY(cancel_mu_);

  mutable absl::Mutex load_mu_;
  EngineLoad load_ ABSL_GUARDED_BY(load_mu_);
  PrefixJournal journal_;  // the cache's stored / evicted hashes, for the load stream

  std::thread thread_;
};

}  // namespace exa::engine
