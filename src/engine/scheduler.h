// The continuous-batching policy of one replica (a sans-IO core, docs/architecture.md#module-map
// rule 1): which sequences run in the next step and how many tokens each feeds, within a per-step
// token budget and the KV cache's free blocks.
//
// Policy: running sequences first in arrival order (decodes cost one token, so latency of
// in-flight requests stays flat), then waiting ones join while budget and blocks last; a prompt
// longer than the remaining budget is prefilled in chunks across steps. When a running sequence
// needs a block and none is free, the most recently admitted running sequence is preempted: its
// blocks are freed and it goes back to the head of the queue, to be recomputed from its tokens
// later (vLLM's recompute preemption: no swap space needed).
//
// Thread safety: none; owned by the engine thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/sequence.h"

namespace exa::engine {

struct SchedulerOptions {
  int32_t max_batch_tokens = 512;
  int32_t max_running = 64;
};

// Work for one sequence in a step: feed tokens[start, start + count).
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t start = 0;
  int32_t count = 0;
  bool sample = false;  // the chunk reaches the end of the known tokens: sample the next one
};

class Scheduler {
 public:
  Scheduler(SchedulerOptions options, KvCache* cache) : options_(options), cache_(cache) {}

  void Enqueue(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }
  // Ahead of every waiting sequence (health probes).
  void EnqueueFront(std::unique_ptr<Sequence> seq) { waiting_.push_front(std::move(seq)); }
  // Chunks for the next step (empty when there is nothing to do).
  std::vector<ScheduledChunk> Schedule();
  // Records that a step ran its chunks (their tokens are now in the cache).
  void MarkComputed(std::span<const ScheduledChunk> chunks);
  // Removes a finished or cancelled sequence wherever it is, freeing its blocks.
  std::unique_ptr<Sequence> Remove(RequestId id);

  const std::deque<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  uint64_t preemptions() const { return preemptions_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }

 private:
  // Preempts the newest running sequence; false when none is left to preempt.
  bool PreemptNewest();
  void ScheduleRunning(std::vector<ScheduledChunk>& out, int32_t& budget);
  void AdmitWaiting(std::vector<ScheduledChunk>& out, int32_t& budget);

  SchedulerOptions options_;
  KvCache* cache_;
  std::deque<std::unique_ptr<Sequence>> running_;  // in admission order
  std::deque<std::unique_ptr<Sequence>> waiting_;  // FIFO; preempted ones at the front
  uint64_t preemptions_ = 0;
};

}  // namespace exa::engine
