#include "router/prefix_index.h"

#include <algorithm>
#include <optional>

namespace exa::router {

PrefixIndex::Entry& PrefixIndex::EntryFor(const std::string& replica) {
  auto [it, inserted] = replicas_.try_emplace(replica);
  Entry& e = it->second;
  if (!inserted) return e;
  if (free_slots_.empty()) {
    e.slot = static_cast<Slot>(slot_ids_.size());
    slot_ids_.push_back(nullptr);
    slot_group_.push_back(0);
    walk_pos_.push_back(0);
    walk_mark_.push_back(0);
  } else {
    e.slot = free_slots_.back();
    free_slots_.pop_back();
  }
  slot_ids_[e.slot] = &it->first;
  if (groups_.empty()) groups_.emplace_back();  // group 0: no snapshot yet
  e.group = 0;
  slot_group_[e.slot] = 0;
  groups_[0].replicas++;
  return e;
}

void PrefixIndex::SetGroup(Entry& e, const std::string& cache_namespace, ReportSchedule report) {
  const Group& current = groups_[e.group];
  if (e.group != 0 && current.cache_namespace == cache_namespace && current.report == report) {
    return;
  }
  groups_[e.group].replicas--;
  uint32_t found = 0, empty = 0;
  for (uint32_t g = 1; g < groups_.size(); ++g) {
    if (groups_[g].cache_namespace == cache_namespace && groups_[g].report == report) found = g;
    if (groups_[g].replicas == 0 && empty == 0) empty = g;
  }
  if (found == 0) {
    found = empty != 0 ? empty : static_cast<uint32_t>(groups_.size());
    if (found == groups_.size()) groups_.emplace_back();
    groups_[found] = {cache_namespace, report, 0};
  }
  groups_[found].replicas++;
  e.group = found;
  slot_group_[e.slot] = found;
}

void PrefixIndex::Store(Entry& e, uint64_t key) {
  if (e.hashes.size() >= max_hashes_ && !e.hashes.contains(key)) {
    ++e.dropped;
    return;
  }
  if (e.hashes.insert(key).second) holders_[key].push_back(e.slot);
}

void PrefixIndex::Erase(Entry& e, uint64_t key) {
  if (e.hashes.erase(key) > 0) DropHolder(e.slot, key);
}

void PrefixIndex::DropHolder(Slot slot, uint64_t key) {
  auto it = holders_.find(key);
  if (it == holders_.end()) return;
  auto& list = it->second;
  auto pos = std::find(list.begin(), list.end(), slot);
  if (pos != list.end()) {
    *pos = list.back();
    list.pop_back();
  }
  if (list.empty()) holders_.erase(it);
}

void PrefixIndex::Clear(Entry& e) {
  for (uint64_t key : e.hashes) DropHolder(e.slot, key);
  e.hashes.clear();
}

PrefixIndex::Applied PrefixIndex::Apply(const std::string& replica, const PrefixCacheDelta& delta) {
  absl::MutexLock lock(&mu_);
  Entry& e = EntryFor(replica);
  if (delta.snapshot) {
    Clear(e);
    for (const CacheEvent& ev : delta.events) {
      if (ev.stored) Store(e, ev.hash.hi);
    }
    e.epoch = delta.epoch;
    e.report = delta.report.Normalized();
    e.cache_namespace = delta.cache_namespace;
    SetGroup(e, e.cache_namespace, e.report);
    e.cursor = delta.to;
    e.stale = false;
    return Applied::kApplied;
  }
  // Deltas on the wire carry no epoch (0): they follow the snapshot of theirs by construction.
  const bool other_epoch = delta.epoch != 0 && delta.epoch != e.epoch;
  if (e.stale || other_epoch || delta.from != e.cursor || delta.to < delta.from) {
    Clear(e);
    e.stale = true;
    return Applied::kStale;
  }
  for (const CacheEvent& ev : delta.events) {
    if (ev.stored) {
      Store(e, ev.hash.hi);
    } else {
      Erase(e, ev.hash.hi);
    }
  }
  e.cursor = delta.to;
  return Applied::kApplied;
}

// The replicas of `group` holding the chain's first reported position, then, position by
// position, those that also hold the next: each walk marks its survivors with a fresh number.
void PrefixIndex::WalkGroup(uint32_t group, const ChainFn& chain_for,
                            absl::FunctionRef<void(const std::string&, int32_t)> found) const {
  const std::string& ns = groups_[group].cache_namespace;
  const ReportSchedule& report = groups_[group].report;
  // The key of position `pos` (1-based), hashing no deeper than asked; nullopt past the chain.
  const auto key_at = [&](int64_t pos) -> std::optional<uint64_t> {
    const std::span<const Hash128> chain = chain_for(ns, static_cast<size_t>(pos));
    if (static_cast<int64_t>(chain.size()) < pos) return std::nullopt;
    return chain[static_cast<size_t>(pos - 1)].hi;
  };
  const uint64_t walk = ++walk_;
  std::vector<Slot> alive;
  int64_t pos = report.Next(0);
  const std::optional<uint64_t> first = key_at(pos);
  if (!first) return;
  if (auto it = holders_.find(*first); it != holders_.end()) {
    for (Slot s : it->second) {
      if (slot_group_[s] != group) continue;
      alive.push_back(s);
      walk_mark_[s] = walk;
      walk_pos_[s] = pos;
    }
  }
  // Survivors (marked by this walk, at the previous position) that hold the next position
  // advance to it; the rest keep the position they reached.
  int64_t advanced = static_cast<int64_t>(alive.size());
  for (int64_t prev = pos, next = report.Next(pos); advanced > 0;
       prev = next, next = report.Next(next)) {
    const std::optional<uint64_t> key = key_at(next);
    if (!key) break;
    auto it = holders_.find(*key);
    if (it == holders_.end()) break;
    advanced = 0;
    for (Slot s : it->second) {
      if (walk_mark_[s] != walk || walk_pos_[s] != prev) continue;
      walk_pos_[s] = next;
      advanced++;
    }
  }
  for (Slot s : alive) found(*slot_ids_[s], static_cast<int32_t>(walk_pos_[s]));
}

std::vector<PrefixIndex::Match> PrefixIndex::Matches(const ChainFn& chain_for) const {
  struct Hashed {
    std::string cache_namespace;
    std::span<const Hash128> chain;
    bool complete = false;  // the whole chain: it has no more blocks
  };
  std::vector<Hashed> hashed;
  std::vector<std::pair<std::string, size_t>> wanted;  // deeper than hashed, by namespace
  const auto want = [&wanted](const std::string& ns, size_t blocks) {
    for (auto& w : wanted) {
      if (w.first == ns) {
        w.second = std::max(w.second, blocks);
        return;
      }
    }
    wanted.emplace_back(ns, blocks);
  };
  // What is hashed of a namespace's chain, noting when a walk wanted more.
  const ChainFn view = [&](const std::string& ns, size_t blocks) -> std::span<const Hash128> {
    for (const Hashed& h : hashed) {
      if (h.cache_namespace != ns) continue;
      if (h.chain.size() < blocks && !h.complete) want(ns, blocks);
      return h.chain.first(std::min(blocks, h.chain.size()));
    }
    want(ns, blocks);
    return {};
  };
  std::vector<Match> out;
  // Twice what the walk wanted (at least 8 blocks), then twice as many a round: a re-walk costs
  // far less than hashing more than needed. 20 rounds reach past any context.
  for (int round = 0; round < 20; ++round) {
    out.clear();
    wanted.clear();
    {
      absl::MutexLock lock(&mu_);
      for (uint32_t g = 1; g < groups_.size(); ++g) {
        if (groups_[g].replicas == 0) continue;
        WalkGroup(g, view, [&out](const std::string& replica, int32_t blocks) {
          out.push_back({replica, blocks});
        });
      }
    }
    if (wanted.empty()) break;
    for (const auto& w : wanted) {
      const std::string& ns = w.first;
      auto it = std::find_if(hashed.begin(), hashed.end(),
                             [&ns](const Hashed& h) { return h.cache_namespace == ns; });
      if (it == hashed.end()) it = hashed.insert(hashed.end(), Hashed{ns, {}, false});
      const size_t ask = std::max<size_t>(8, 2 * std::max(w.second, it->chain.size()));
      it->chain = chain_for(ns, ask);
      it->complete = it->chain.size() < ask;
    }
  }
  return out;
}

void PrefixIndex::Remove(const std::string& replica) {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(replica);
  if (it == replicas_.end()) return;
  Entry& e = it->second;
  Clear(e);
  groups_[e.group].replicas--;
  slot_ids_[e.slot] = nullptr;
  free_slots_.push_back(e.slot);
  replicas_.erase(it);
}

int32_t PrefixIndex::MatchedBlocks(const std::string& replica,
                                   std::span<const Hash128> hashes) const {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(replica);
  if (it == replicas_.end() || it->second.stale) return 0;
  const Entry& e = it->second;
  const auto n = static_cast<int64_t>(hashes.size());
  int64_t matched = 0;
  for (int64_t next = e.report.Next(0); next <= n; next = e.report.Next(next)) {
    if (!e.hashes.contains(hashes[static_cast<size_t>(next - 1)].hi)) break;
    matched = next;
  }
  return static_cast<int32_t>(matched);
}

PrefixIndex::ReplicaState PrefixIndex::State(const std::string& replica) const {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(replica);
  if (it == replicas_.end()) return {};
  const Entry& e = it->second;
  return {e.epoch, e.cursor, e.stale, e.report, e.hashes.size(), e.dropped, e.cache_namespace};
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
