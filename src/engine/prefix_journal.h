// A replica's cached-block report (docs/architecture.md#prefix-cache): the engine thread appends
// the KV cache's stored / evicted hash events, numbered; readers on other threads (the node's
// load stream, one cursor per gateway) ask for what followed their cursor. The journal keeps the
// last `capacity` events and the current set; a reader whose cursor fell out of the window, or
// who comes from another epoch (the replica restarted), gets a snapshot of the set instead.
//
// Bounded: `capacity` events; a delta carries at most the reader's `max_events` (the rest follow
// in the next one); a snapshot at most `max_snapshot` hashes (past it the reader under-reports
// what the replica holds, which only costs routing a hit it did not know of).
//
// Thread safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/prefix_delta.h"
#include "engine/kv_cache.h"
#include "engine/prefix_hash.h"

namespace exa::engine {

using ::exa::PrefixCacheDelta;

class PrefixJournal {
 public:
  static constexpr size_t kDefaultCapacity = 1 << 16;
  static constexpr size_t kDefaultMaxSnapshot = 1 << 18;

  // `report`: the cache's (kv_cache.h), carried in every delta; `cache_namespace`
  // (EngineOptions::prefix_cache_namespace) on every snapshot.
  explicit PrefixJournal(uint64_t epoch, ReportSchedule report = {},
                         std::string cache_namespace = "", size_t capacity = kDefaultCapacity,
                         size_t max_snapshot = kDefaultMaxSnapshot);

  // Engine thread: appends `events` (numbered next_seq() onwards).
  void Append(std::span<const CacheEvent> events) ABSL_LOCKS_EXCLUDED(mu_);
  // Engine thread, after the cache dropped events: the set is now `hashes`; readers resync.
  void Reset(std::span<const BlockHash> hashes) ABSL_LOCKS_EXCLUDED(mu_);

  // What a reader that has seen everything up to `cursor` of `epoch` needs next: at most
  // `max_events` events after it, or a snapshot of at most `max_snapshot` hashes (and the
  // journal's own bound) when they are no longer kept.
  PrefixCacheDelta Since(uint64_t epoch, uint64_t cursor, size_t max_events,
                         size_t max_snapshot = kDefaultMaxSnapshot) const ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t epoch() const { return epoch_; }
  // The current set (tests, diagnostics).
  std::vector<BlockHash> Hashes() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t last_seq() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void AppendLocked(const CacheEvent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t epoch_;
  const ReportSchedule report_;
  const std::string cache_namespace_;
  const size_t capacity_;
  const size_t max_snapshot_;
  mutable absl::Mutex mu_;
  std::deque<CacheEvent> events_ ABSL_GUARDED_BY(mu_);  // events (last_seq_ - size, last_seq_]
  uint64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Sequence number at which the current set was last replaced: readers before it resync.
  uint64_t reset_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<BlockHash> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exa::engine
