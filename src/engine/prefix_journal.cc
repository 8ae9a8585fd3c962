#include "engine/prefix_journal.h"

#include <algorithm>

namespace exa::engine {

PrefixJournal::PrefixJournal(uint64_t epoch, ReportSchedule report, std::string cache_namespace,
                             size_t capacity, size_t max_snapshot)
    : epoch_(epoch),
      report_(report.Normalized()),
      cache_namespace_(std::move(cache_namespace)),
      capacity_(std::max<size_t>(1, capacity)),
      max_snapshot_(max_snapshot) {}

void PrefixJournal::AppendLocked(const CacheEvent& e) {
  if (e.stored) {
    current_.insert(e.hash);
  } else {
    current_.erase(e.hash);
  }
  events_.push_back(e);
  ++last_seq_;
  if (events_.size() > capacity_) events_.pop_front();
}

void PrefixJournal::Append(std::span<const CacheEvent> events) {
  if (events.empty()) return;
  absl::MutexLock lock(&mu_);
  for (const CacheEvent& e : events) AppendLocked(e);
}

void PrefixJournal::Reset(std::span<const BlockHash> hashes) {
  absl::MutexLock lock(&mu_);
  current_.clear();
  current_.insert(hashes.begin(), hashes.end());
  events_.clear();
  ++last_seq_;  // every cursor is now behind a reset
  reset_seq_ = last_seq_;
}

PrefixCacheDelta PrefixJournal::Since(uint64_t epoch, uint64_t cursor, size_t max_events,
                                      size_t max_snapshot) const {
  absl::MutexLock lock(&mu_);
  PrefixCacheDelta d;
  d.epoch = epoch_;
  d.report = report_;
  const uint64_t first_kept = last_seq_ - events_.size();  // events (first_kept, last_seq_]
  if (epoch != epoch_ || cursor < reset_seq_ || cursor < first_kept || cursor > last_seq_) {
    d.snapshot = true;
    d.to = last_seq_;
    d.cache_namespace = cache_namespace_;
    const size_t limit = std::min(max_snapshot, max_snapshot_);
    d.events.reserve(std::min(current_.size(), limit));
    for (const BlockHash& h : current_) {
      if (d.events.size() >= limit) break;
      d.events.push_back({true, h});
    }
    return d;
  }
  d.from = cursor;
  const size_t n = std::min<uint64_t>(last_seq_ - cursor, max_events);
  const size_t start = static_cast<size_t>(cursor - first_kept);
  d.events.assign(events_.begin() + static_cast<int64_t>(start),
                  events_.begin() + static_cast<int64_t>(start + n));
  d.to = cursor + n;
  return d;
}

uint64_t PrefixJournal::last_seq() const {
  absl::MutexLock lock(&mu_);
  return last_seq_;
}

std::vector<BlockHash> PrefixJournal::Hashes() const {
  absl::MutexLock lock(&mu_);
  return {current_.begin(), current_.end()};
}

size_t PrefixJournal::size() const {
  absl::MutexLock lock(&mu_);
  return current_.size();
}

}  // namespace exa::engine
