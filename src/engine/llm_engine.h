// The Engine implementation shared by every backend: admission queue, engine thread, scheduler,
// sampling, stop conditions, streaming and the load report. What a step computes is delegated
// to a StepExecutor (model on a Backend, or the sim cost model).
//
// Threading: see engine.h. Internally: Submit pushes to a BoundedQueue and bumps atomic
// counters; Cancel adds to a mutex-guarded set; the engine thread owns the scheduler, the KV
// cache and every Sequence, and publishes the load snapshot under load_mu_.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/bounded_queue.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/latency_window.h"
#include "engine/scheduler.h"
#include "engine/step_executor.h"

namespace exa::engine {

class LlmEngine final : public Engine {
 public:
  LlmEngine(const EngineOptions& options, EngineInfo info, std::unique_ptr<StepExecutor> executor,
            std::shared_ptr<const Detokenizer> detokenizer);
  ~LlmEngine() override;

  absl::StatusOr<RequestId> Submit(GenerateRequest request) override;
  void Cancel(RequestId id) override;
  EngineLoad Load() const override;
  const EngineInfo& info() const override { return info_; }
  void Stop() override;

 private:
  void Loop();
  void Admit(std::unique_ptr<Sequence> seq);
  void DrainAdmissions();
  void ApplyCancels();
  absl::Status RunStep(const std::vector<ScheduledChunk>& chunks);
  // Appends a sampled token to `seq` and streams it; returns the finish reason, if any.
  FinishReason Accept(Sequence& seq, const SampledToken& sampled, absl::Time now);
  void Finish(RequestId id, FinishReason reason, absl::Status status);
  void PublishLoad();
  absl::Status ValidateRequest(const GenerateRequest& request) const;

  const EngineOptions options_;
  const EngineInfo info_;
  std::unique_ptr<StepExecutor> executor_;
  std::shared_ptr<const Detokenizer> detokenizer_;

  BoundedQueue<std::unique_ptr<Sequence>> queue_;
  std::atomic<RequestId> next_id_{1};
  std::atomic<int64_t> queued_tokens_{0};  // pending-token estimate of requests still queued
  std::atomic<bool> stopping_{false};

  absl::Mutex cancel_mu_;
  absl::flat_hash_set<RequestId> cancelled_ ABSL_GUARDED_BY(cancel_mu_);

  // Engine-thread state.
  KvCache cache_;
  Scheduler scheduler_;
  std::vector<float> logits_;
  LatencyWindow ttft_ms_, itl_ms_;
  uint64_t steps_ = 0;
  uint64_t seed_counter_ = 0;

  mutable absl::Mutex load_mu_;
  EngineLoad load_ ABSL_GUARDED_BY(load_mu_);

  std::thread thread_;
};

}  // namespace exa::engine
