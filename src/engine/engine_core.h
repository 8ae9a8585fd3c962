// The replica's batching loop as a sans-IO core (docs/architecture.md#module-map rule 1): requests
// are admitted, each Step() schedules, executes, samples and streams one batch, and time comes from
// an injected Clock. LlmEngine runs it on a thread with real time; SimReplica runs it in virtual
// time for exaserve-sim. Both report the same load.
//
// Thread safety: none; one owner drives it (the engine thread, or the simulator).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "engine/detokenizer.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/latency_window.h"
#include "engine/output_length_history.h"
#include "engine/prefix_journal.h"
#include "engine/scheduler.h"
#include "engine/step_executor.h"

namespace exa::engine {

// Decode tokens `seq` may still produce: its remaining max_tokens, bounded by the context left.
int64_t DecodeCap(const Sequence& seq, int32_t max_context);
// The router's estimate of work still owed to `seq`: prompt tokens not yet prefilled plus the
// decode tokens expected from `history` (output_length_history.h), capped by DecodeCap.
int64_t EstimatedPendingTokens(const Sequence& seq, int32_t max_context,
                               const OutputLengthHistory& history);

class EngineCore {
 public:
  EngineCore(const EngineOptions& options, EngineInfo info, std::unique_ptr<StepExecutor> executor,
             std::shared_ptr<const Detokenizer> detokenizer, const Clock* clock);

  const EngineInfo& info() const { return info_; }
  // The admission checks of Engine::Submit (all but queue capacity).
  absl::Status Validate(const GenerateRequest& request) const;
  void Admit(std::unique_ptr<Sequence> seq);
  // Ends the request with CANCELLED and frees its blocks; unknown ids are ignored.
  void Cancel(RequestId id);
  void CancelAll(const absl::Status& status);
  bool HasWork() const { return !scheduler_.idle(); }
  int32_t waiting() const { return static_cast<int32_t>(scheduler_.waiting().size()); }

  // Runs one step (nothing when idle). A modeled step time (sim executor) is handed to `wait`
  // before tokens are streamed: the thread engine sleeps, the simulator advances its clock.
  // Returns the modeled time (zero for real backends).
  absl::StatusOr<absl::Duration> Step(const std::function<void(absl::Duration)>& wait);

  EngineLoad Load() const;
  // Moves the KV cache's stored / evicted hash events into `journal` (a reset to the cache's
  // whole set when events were dropped).
  void PublishCacheEvents(PrefixJournal& journal);

 private:
  // Streams the step's tokens: from device_tokens_ when `sampled_on_device`, else sampled here
  // from logits_.
  void Complete(const std::vector<ScheduledChunk>& chunks, bool sampled_on_device);
  // A sampling chunk's token chosen on the host; `writable` false when its structured output's
  // mask left no token.
  struct HostSample {
    SampledToken token;
    bool writable = true;
  };
  // Masks (structured outputs) and samples the logits row of every sampling chunk, the rows
  // spread over the executor's host threads; [i] is chunk i's.
  std::vector<HostSample> SampleOnHost(const std::vector<ScheduledChunk>& chunks);
  // Appends a sampled token to `seq` and streams it; returns the finish reason, if any.
  FinishReason Accept(Sequence& seq, const SampledToken& sampled, absl::Time now);
  // An end-of-sequence token (unless ignored) or one of the request's stop tokens.
  bool IsStopToken(const GenerateRequest& r, int32_t token) const;
  // Whether `seq` is short of its min_tokens and free (a structured output ends where its grammar
  // does): its end-of-sequence and stop ids are then masked on the host.
  static bool HoldsEnd(const Sequence& seq);
  void MaskEnd(const GenerateRequest& r, std::span<float> logits) const;
  // How a resumed request's earlier output had already ended, or kNone (engine/request.h).
  FinishReason EndedBeforeResume(const Sequence& seq) const;
  void Finish(RequestId id, FinishReason reason, absl::Status status);

  const EngineOptions options_;
  const EngineInfo info_;
  std::unique_ptr<StepExecutor> executor_;
  std::shared_ptr<const Detokenizer> detokenizer_;
  const Clock* clock_;
  KvCache cache_;
  Scheduler scheduler_;
  std::vector<float> logits_;
  std::vector<DeviceSampling> device_sampling_;  // the step's rows, when sampled on the device
  std::vector<int32_t> device_tokens_;
  LatencyWindow ttft_ms_, itl_ms_;
  LatencyWindow queue_ms_;  // arrival to the first step that runs a request
  // How the last requests ended, as a ring: true for an engine error (Load's error_rate).
  static constexpr size_t kOutcomes = 256;
  std::array<bool, kOutcomes> outcomes_{};
  size_t outcome_count_ = 0, outcome_next_ = 0, outcome_errors_ = 0;
  OutputLengthHistory output_lengths_;
  uint64_t steps_ = 0;
  uint64_t seed_counter_ = 0;
  double schedule_seconds_ = 0, execute_seconds_ = 0, complete_seconds_ = 0;
};

}  // namespace exa::engine
