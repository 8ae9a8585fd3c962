// Paged KV cache bookkeeping (vLLM's PagedAttention idea) with automatic prefix caching
// (docs/architecture.md#prefix-cache): the cache is a fixed array of blocks of `block_size` token
// slots, sized once from the replica's byte budget; each sequence owns a block table listing its
// blocks in order, growing one block at a time. This class hands out and takes back block
// numbers; the memory itself lives in the Backend.
//
// Prefix caching: a full block whose K and V are computed can be published under its chained
// content hash (prefix_hash.h). A later sequence whose leading blocks hash the same takes those
// blocks (a reference each) instead of computing them. Blocks are reference counted; a published
// block nobody references stays cached in an LRU list and is evicted (its hash forgotten) only
// when a block is needed and no never-used block is left, or when the unreferenced cached blocks
// exceed `max_cached_fraction` of the cache. A block is published once its owner has written
// all of it and is never written again: sequences only write past their last full shared block,
// so sharing needs no copy-on-write. Partial blocks are never published.
//
// Publishes and evictions of the blocks of a chain `report` names are recorded as
// events (stored / evicted hash) for the replica's cached-block report; at most kMaxPendingEvents
// wait to be taken, beyond which they are dropped and events_lost() tells the consumer to
// resynchronise from Snapshot().
//
// Thread safety: none; owned by the engine thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/prefix_delta.h"
#include "engine/model_config.h"
#include "engine/prefix_hash.h"

namespace exa::engine {

struct PrefixCacheOptions {
  bool enabled = true;
  // Unreferenced cached blocks may hold at most this fraction of the cache; 1: all of it.
  double max_cached_fraction = 1.0;
  // Events are recorded for the blocks of a chain this schedule names only (common/prefix_delta.h):
  // a chained hash names its whole prefix, so a reader still finds a request's cached prefix, to
  // within the stride at its depth, at a fraction of the report's bandwidth. Default: every 4th
  // block (64 tokens of 16) near a chain's root, then to within a quarter of the depth, the
  // stride at most 1024 blocks (16 k tokens) deep in it (docs/perf/prefix-report.md).
  ReportSchedule report = {.every_blocks = 4, .max_every_blocks = 1024};
};

using ::exa::CacheEvent;

class KvCache {
 public:
  static constexpr size_t kMaxPendingEvents = 1 << 16;

  KvCache(int32_t num_blocks, int32_t block_size, PrefixCacheOptions prefix = {});

  // Blocks a byte budget buys for `config` (fp32 K and V for every layer), or 0.
  static int32_t BlocksForBudget(int64_t budget_bytes, const ModelConfig& config,
                                 int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int32_t total_blocks() const { return num_blocks_; }
  // Blocks a Grow can take now: never-used ones plus cached ones nobody references.
  int32_t free_blocks() const { return static_cast<int32_t>(free_.size()) + lru_size_; }
  // Blocks some sequence references.
  int32_t used_blocks() const { return num_blocks_ - free_blocks(); }
  // Blocks published under a hash (referenced or not): what the replica can serve from cache.
  int32_t cached_blocks() const { return static_cast<int32_t>(by_hash_.size()); }
  uint64_t evictions() const { return evictions_; }
  bool prefix_caching() const { return prefix_.enabled; }

  int32_t BlocksFor(int32_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  // Blocks `table` still needs to hold `tokens` tokens.
  int32_t Shortfall(const std::vector<int32_t>& table, int32_t tokens) const;
  // Extends `table` to hold `tokens` tokens, evicting cached blocks nobody references when no
  // never-used block is left; all or nothing: false (and no change) when too few are free.
  bool Grow(std::vector<int32_t>* table, int32_t tokens);
  // Drops `table`'s reference to each of its blocks and empties it.
  void Free(std::vector<int32_t>* table);
  // The cache slot of token `position` of a sequence with `table`.
  int32_t Slot(const std::vector<int32_t>& table, int32_t position) const {
    return table[position / block_size_] * block_size_ + position % block_size_;
  }

  // Prefix caching. The number of leading `hashes` cached (at most max_blocks), each appended to
  // the empty `table` with a reference. `tokens` are the sequence's tokens, compared with the
  // cached block's in debug builds.
  int32_t AcquirePrefix(std::span<const BlockHash> hashes, int32_t max_blocks,
                        std::span<const int32_t> tokens, std::vector<int32_t>* table);
  // Publishes table[i] under hashes[i] for i in [from, hashes.size()): blocks whose every slot
  // is written. A hash already published by another block (two sequences computed the same
  // prefix at once) leaves this block private.
  void Publish(const std::vector<int32_t>& table, std::span<const BlockHash> hashes, int32_t from,
               std::span<const int32_t> tokens);

  // Events since the last call, oldest first.
  std::vector<CacheEvent> TakeEvents();
  // Whether events were dropped since the last Snapshot (the pending list was full).
  bool events_lost() const { return events_lost_; }
  // Every published hash recorded in events (the report schedule); clears events_lost() and the
  // pending events, which it supersedes.
  std::vector<BlockHash> Snapshot();

  // Checks every invariant (reference counts against `tables`, the LRU list, the hash index);
  // for tests. Returns an empty string when all hold, else what broke.
  std::string CheckInvariants(std::span<const std::vector<int32_t>> tables) const;

 private:
  static constexpr int32_t kNone = -1;

  int32_t TakeBlock();  // a free block, or the least recently used cached one
  void LruPush(int32_t b);
  void LruRemove(int32_t b);
  void Evict(int32_t b);
  void Record(bool stored, int32_t block);
  void TrimCached();

  int32_t num_blocks_;
  int32_t block_size_;
  PrefixCacheOptions prefix_;
  int32_t max_cached_blocks_;
  std::vector<int32_t> free_;  // never used or evicted; a stack: recently freed reused first
  std::vector<int32_t> refs_;
  std::vector<uint8_t> published_;
  std::vector<BlockHash> hash_;
  std::vector<int32_t> position_;  // a published block's index in its chain
  // Unreferenced published blocks, least recently used first: a list threaded through the block
  // numbers, with block num_blocks_ as its sentinel.
  std::vector<int32_t> lru_prev_, lru_next_;
  int32_t lru_size_ = 0;
  absl::flat_hash_map<BlockHash, int32_t> by_hash_;
#ifndef NDEBUG
  std::vector<std::vector<int32_t>> block_tokens_;  // a published block's tokens, for hit checks
#endif
  std::vector<CacheEvent> events_;
  bool events_lost_ = false;
  uint64_t evictions_ = 0;
};

}  // namespace exa::engine
