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
// Prefix caching (kv_cache.h): a sequence admitted with no blocks first takes every leading full
// block of its tokens the cache holds (at most all but its last token, whose logits it needs),
// and prefills only the rest; each block a step fills is published for later sequences. A
// preempted sequence's blocks stay cached when published, so its recompute is mostly hits.
//
// Thread safety: none; owned by the engine thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/prefix_hash.h"
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
  // `cache_namespace` names what the cached K and V depend on besides the tokens (model,
  // version, dtype): the root of every sequence's block hashes, with its cache salt.
  Scheduler(SchedulerOptions options, KvCache* cache, std::string cache_namespace = "")
      : options_(options), cache_(cache), cache_namespace_(std::move(cache_namespace)) {}

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
  // Tokens admitted sequences took from the prefix cache, and tokens they had to compute (every
  // admission, re-admissions after preemption included).
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  int64_t prefix_miss_tokens() const { return prefix_miss_tokens_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }

 private:
  // Preempts the newest running sequence; false when none is left to preempt.
  bool PreemptNewest();
  void ScheduleRunning(std::vector<ScheduledChunk>& out, int32_t& budget);
  void AdmitWaiting(std::vector<ScheduledChunk>& out, int32_t& budget);
  // Hashes `seq`'s first `full_blocks` full blocks (those not hashed yet).
  void HashBlocks(Sequence& seq, int32_t full_blocks);
  // Takes `seq`'s cached leading blocks (it holds none); sets computed past them.
  void TakeCachedPrefix(Sequence& seq);
  // Publishes the blocks of `seq` its computed tokens now fill.
  void PublishFilled(Sequence& seq);

  SchedulerOptions options_;
  KvCache* cache_;
  std::string cache_namespace_;
  PrefixHasher hasher_;
  std::deque<std::unique_ptr<Sequence>> running_;  // in admission order
  std::deque<std::unique_ptr<Sequence>> waiting_;  // FIFO; preempted ones at the front
  uint64_t preemptions_ = 0;
  int64_t prefix_hit_tokens_ = 0, prefix_miss_tokens_ = 0;
};

}  // namespace exa::engine
