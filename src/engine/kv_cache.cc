#include "engine/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "common/check.h"

namespace exa::engine {

KvCache::KvCache(int32_t num_blocks, int32_t block_size, PrefixCacheOptions prefix)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      prefix_(prefix),
      refs_(static_cast<size_t>(std::max(0, num_blocks)), 0),
      published_(static_cast<size_t>(std::max(0, num_blocks)), 0),
      hash_(static_cast<size_t>(std::max(0, num_blocks))),
      position_(static_cast<size_t>(std::max(0, num_blocks)), 0),
      lru_prev_(static_cast<size_t>(std::max(0, num_blocks)) + 1, kNone),
      lru_next_(static_cast<size_t>(std::max(0, num_blocks)) + 1, kNone) {
  EXA_CHECK(num_blocks >= 0 && block_size > 0) << num_blocks << " blocks of " << block_size;
  EXA_CHECK(prefix.max_cached_fraction >= 0 && prefix.max_cached_fraction <= 1)
      << "max_cached_fraction " << prefix.max_cached_fraction;
  prefix_.report = prefix.report.Normalized();
  max_cached_blocks_ = static_cast<int32_t>(std::floor(prefix.max_cached_fraction * num_blocks));
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
  lru_prev_[num_blocks] = lru_next_[num_blocks] = num_blocks;  // the empty list's sentinel
#ifndef NDEBUG
  block_tokens_.resize(static_cast<size_t>(num_blocks));
#endif
}

int32_t KvCache::BlocksForBudget(int64_t budget_bytes, const ModelConfig& config,
                                 int32_t block_size) {
  const int64_t block_bytes = config.KvBytesPerToken() * block_size;
  if (block_bytes <= 0 || budget_bytes <= 0) return 0;
  return static_cast<int32_t>(std::min<int64_t>(budget_bytes / block_bytes,
                                                std::numeric_limits<int32_t>::max() / block_size));
}

int32_t KvCache::Shortfall(const std::vector<int32_t>& table, int32_t tokens) const {
  return std::max(0, BlocksFor(tokens) - static_cast<int32_t>(table.size()));
}

void KvCache::LruPush(int32_t b) {
  const int32_t tail = lru_prev_[num_blocks_];
  lru_prev_[b] = tail;
  lru_next_[b] = num_blocks_;
  lru_next_[tail] = b;
  lru_prev_[num_blocks_] = b;
  ++lru_size_;
}

void KvCache::LruRemove(int32_t b) {
  lru_next_[lru_prev_[b]] = lru_next_[b];
  lru_prev_[lru_next_[b]] = lru_prev_[b];
  lru_prev_[b] = lru_next_[b] = kNone;
  --lru_size_;
}

void KvCache::Record(bool stored, int32_t block) {
  if (!prefix_.report.Reports(position_[block] + 1)) return;
  if (events_.size() >= kMaxPendingEvents) {
    events_.clear();  // the consumer resynchronises from a snapshot instead
    events_lost_ = true;
  }
  if (!events_lost_) events_.push_back({stored, hash_[block]});
}

void KvCache::Evict(int32_t b) {
  LruRemove(b);
  by_hash_.erase(hash_[b]);
  published_[b] = 0;
  ++evictions_;
  Record(false, b);
}

int32_t KvCache::TakeBlock() {
  if (!free_.empty()) {
    const int32_t b = free_.back();
    free_.pop_back();
    return b;
  }
  const int32_t b = lru_next_[num_blocks_];  // least recently used
  EXA_CHECK(b != num_blocks_) << "no block to take";
  Evict(b);
  return b;
}

bool KvCache::Grow(std::vector<int32_t>* table, int32_t tokens) {
  const int32_t need = Shortfall(*table, tokens);
  if (need > free_blocks()) return false;
  for (int32_t i = 0; i < need; ++i) {
    const int32_t b = TakeBlock();
    refs_[b] = 1;
    table->push_back(b);
  }
  return true;
}

void KvCache::Free(std::vector<int32_t>* table) {
  // Tail blocks first: they become least recently used, so a chain is evicted from its end and
  // its shared head stays cached longest (a later block is useless without the earlier ones).
  for (auto it = table->rbegin(); it != table->rend(); ++it) {
    const int32_t b = *it;
    EXA_CHECK(refs_[b] > 0) << "block " << b << " freed with no reference";
    if (--refs_[b] > 0) continue;
    if (published_[b]) {
      LruPush(b);
    } else {
      free_.push_back(b);
    }
  }
  table->clear();
  TrimCached();
}

void KvCache::TrimCached() {
  while (lru_size_ > max_cached_blocks_) {
    const int32_t b = lru_next_[num_blocks_];
    Evict(b);
    free_.push_back(b);
  }
}

int32_t KvCache::AcquirePrefix(std::span<const BlockHash> hashes, int32_t max_blocks,
                               std::span<const int32_t> tokens, std::vector<int32_t>* table) {
  EXA_CHECK(table->empty()) << "a prefix is acquired into an empty block table";
  if (!prefix_.enabled) return 0;
  const auto n = std::min<int32_t>(static_cast<int32_t>(hashes.size()), max_blocks);
  for (int32_t i = 0; i < n; ++i) {
    auto it = by_hash_.find(hashes[static_cast<size_t>(i)]);
    if (it == by_hash_.end()) break;
    const int32_t b = it->second;
#ifndef NDEBUG
    EXA_CHECK(std::equal(block_tokens_[b].begin(), block_tokens_[b].end(),
                         tokens.begin() + int64_t{i} * block_size_))
        << "prefix hash collision on block " << i;
#else
    (void)tokens;
#endif
    if (refs_[b] == 0) LruRemove(b);
    ++refs_[b];
    table->push_back(b);
  }
  return static_cast<int32_t>(table->size());
}

void KvCache::Publish(const std::vector<int32_t>& table, std::span<const BlockHash> hashes,
                      int32_t from, std::span<const int32_t> tokens) {
  if (!prefix_.enabled) return;
  for (auto i = static_cast<size_t>(from); i < hashes.size(); ++i) {
    const int32_t b = table[i];
    if (published_[b]) continue;                               // taken from the cache
    if (!by_hash_.try_emplace(hashes[i], b).second) continue;  // computed twice: stays private
    published_[b] = 1;
    hash_[b] = hashes[i];
    position_[b] = static_cast<int32_t>(i);
#ifndef NDEBUG
    block_tokens_[b].assign(tokens.begin() + static_cast<int64_t>(i) * block_size_,
                            tokens.begin() + static_cast<int64_t>(i + 1) * block_size_);
#else
    (void)tokens;
#endif
    Record(true, b);
  }
}

std::vector<CacheEvent> KvCache::TakeEvents() {
  std::vector<CacheEvent> out;
  out.swap(events_);
  return out;
}

std::vector<BlockHash> KvCache::Snapshot() {
  std::vector<BlockHash> out;
  out.reserve(by_hash_.size());
  for (const auto& [hash, block] : by_hash_) {
    if (prefix_.report.Reports(position_[block] + 1)) out.push_back(hash);
  }
  events_.clear();
  events_lost_ = false;
  return out;
}

std::string KvCache::CheckInvariants(std::span<const std::vector<int32_t>> tables) const {
  std::ostringstream err;
  std::vector<int32_t> refs(static_cast<size_t>(num_blocks_), 0);
  for (const auto& table : tables) {
    for (int32_t b : table) ++refs[b];
  }
  std::vector<uint8_t> in_free(static_cast<size_t>(num_blocks_), 0);
  for (int32_t b : free_) {
    if (in_free[b]++) err << "block " << b << " twice on the free list; ";
    if (published_[b]) err << "free block " << b << " is published; ";
  }
  int32_t lru = 0;
  for (int32_t b = lru_next_[num_blocks_]; b != num_blocks_ && lru <= num_blocks_;
       b = lru_next_[b], ++lru) {
    if (refs_[b] != 0 || !published_[b]) err << "LRU block " << b << " is referenced or private; ";
  }
  if (lru != lru_size_) err << "LRU holds " << lru << " blocks, counted " << lru_size_ << "; ";
  for (int32_t b = 0; b < num_blocks_; ++b) {
    if (refs[b] != refs_[b])
      err << "block " << b << " has " << refs_[b] << " refs, tables " << refs[b] << "; ";
    const bool listed = in_free[b] || (refs_[b] == 0 && published_[b]);
    if ((refs_[b] == 0) != listed) err << "block " << b << " is lost or double-owned; ";
    if (published_[b]) {
      auto it = by_hash_.find(hash_[b]);
      if (it == by_hash_.end() || it->second != b) err << "block " << b << " not indexed; ";
    }
  }
  int32_t published = 0;
  for (uint8_t p : published_) published += p;
  if (published != static_cast<int32_t>(by_hash_.size())) err << "index size mismatch; ";
  return err.str();
}

}  // namespace exa::engine
