#include "router/prefix_index.h"

#include <algorithm>

namespace exa::router {

void PrefixIndex::Store(Entry& e, uint64_t key) {
  if (e.hashes.size() >= max_hashes_ && !e.hashes.contains(key)) {
    ++e.dropped;
    return;
  }
  e.hashes.insert(key);
}

PrefixIndex::Applied PrefixIndex::Apply(const std::string& replica, const PrefixCacheDelta& delta) {
  absl::MutexLock lock(&mu_);
  Entry& e = replicas_[replica];
  if (delta.snapshot) {
    e.hashes.clear();
    for (const CacheEvent& ev : delta.events) {
      if (ev.stored) Store(e, ev.hash.hi);
    }
    e.epoch = delta.epoch;
    e.report_every_blocks = std::max(1, delta.report_every_blocks);
    e.cache_namespace = delta.cache_namespace;
    e.cursor = delta.to;
    e.stale = false;
    return Applied::kApplied;
  }
  // Deltas on the wire carry no epoch (0): they follow the snapshot of theirs by construction.
  const bool other_epoch = delta.epoch != 0 && delta.epoch != e.epoch;
  if (e.stale || other_epoch || delta.from != e.cursor || delta.to < delta.from) {
    e.hashes.clear();
    e.stale = true;
    return Applied::kStale;
  }
  for (const CacheEvent& ev : delta.events) {
    if (ev.stored) {
      Store(e, ev.hash.hi);
    } else {
      e.hashes.erase(ev.hash.hi);
    }
  }
  e.cursor = delta.to;
  return Applied::kApplied;
}

void PrefixIndex::Remove(const std::string& replica) {
  absl::MutexLock lock(&mu_);
  replicas_.erase(replica);
}

int32_t PrefixIndex::MatchedBlocks(const std::string& replica,
                                   std::span<const Hash128> hashes) const {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(replica);
  if (it == replicas_.end() || it->second.stale) return 0;
  const Entry& e = it->second;
  const size_t k = static_cast<size_t>(e.report_every_blocks);
  size_t matched = 0;
  while (matched + k <= hashes.size() && e.hashes.contains(hashes[matched + k - 1].hi)) {
    matched += k;
  }
  return static_cast<int32_t>(matched);
}

PrefixIndex::ReplicaState PrefixIndex::State(const std::string& replica) const {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(replica);
  if (it == replicas_.end()) return {};
  const Entry& e = it->second;
  return {e.epoch,         e.cursor,  e.stale,          e.report_every_blocks,
          e.hashes.size(), e.dropped, e.cache_namespace};
}

bool PrefixIndex::Holds(const std::string& replica, std::span<const Hash128> hashes) const {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(replica);
  if (it == replicas_.end()) return hashes.empty();
  absl::flat_hash_set<uint64_t> want;
  for (const Hash128& h : hashes) want.insert(h.hi);
  return it->second.hashes == want;
}

}  // namespace exa::router
