// A sim-backend replica in virtual time, for exaserve-sim routing and scale runs with thousands
// of replicas in one process: the same scheduler, KV accounting, streaming and load report as
// the threaded engine (both drive an EngineCore), with step times from the SimCostModel applied
// to a per-replica virtual clock instead of sleeps.
//
// Time model: a step starts when the replica is free and has work, and all its tokens appear at
// the step's end (StreamEvent::time). A step that starts before RunUntil's bound is run whole,
// so its events may be stamped after that bound.
//
// Thread safety: none; the simulator drives it from one thread.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "engine/engine.h"
#include "engine/engine_core.h"

namespace exa::engine {

// The EngineInfo of a sim replica for `options` (context, vocab and KV blocks from the cost
// model and the byte budget).
absl::StatusOr<EngineInfo> SimEngineInfo(const EngineOptions& options);

class SimReplica {
 public:
  static absl::StatusOr<std::unique_ptr<SimReplica>> Create(const EngineOptions& options,
                                                            absl::Time start);

  // Admission as Engine::Submit; the request arrives at `now` (>= the last `now` given).
  absl::StatusOr<RequestId> Submit(GenerateRequest request, absl::Time now);
  void Cancel(RequestId id, absl::Time now);
  // Runs every step that starts at or before `until`.
  void RunUntil(absl::Time until);
  // When the replica next changes state by itself: the end of its current work's next step
  // (its clock when it has work), or InfiniteFuture when idle.
  absl::Time NextStepTime() const;
  EngineLoad Load() const { return core_->Load(); }
  const EngineInfo& info() const { return core_->info(); }
  // Moves the cache's stored / evicted events into `journal` (EngineCore::PublishCacheEvents).
  void PublishCacheEvents(PrefixJournal& journal) { core_->PublishCacheEvents(journal); }
  absl::Time now() const { return clock_.Now(); }

 private:
  SimReplica(absl::Time start) : clock_(start) {}
  void CatchUp(absl::Time now);

  ManualClock clock_;
  std::unique_ptr<EngineCore> core_;
  RequestId next_id_ = 1;
  int32_t max_queue_ = 0;
};

}  // namespace exa::engine
