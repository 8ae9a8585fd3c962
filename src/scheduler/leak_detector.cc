#include "scheduler/leak_detector.h"

namespace exa::scheduler {

bool LeakDetector::Observe(const std::string& id, uint64_t generation, absl::Time now,
                           uint64_t bytes) {
  auto it = tracks_.find(id);
  if (it == tracks_.end() || it->second.generation != generation) {
    if (it == tracks_.end() && tracks_.size() >= options_.max_replicas) return false;
    Track t;
    t.generation = generation;
    t.baseline = bytes;
    t.last = now;
    t.samples = {bytes};
    tracks_[id] = std::move(t);
    return false;
  }
  Track& t = it->second;
  if (now - t.last < options_.interval) return false;
  t.last = now;
  t.samples.push_back(bytes);
  const size_t keep = static_cast<size_t>(options_.rising_samples) + 1;
  if (t.samples.size() > keep) t.samples.erase(t.samples.begin(), t.samples.end() - keep);
  const double base = static_cast<double>(std::max<uint64_t>(t.baseline, 1));
  const double step = options_.noise * base;
  if (t.flagged) {
    // Cleared once memory is back near the baseline.
    if (static_cast<double>(bytes) <= base * (1 + options_.noise)) t.flagged = false;
    return false;
  }
  if (t.samples.size() < keep) return false;
  for (size_t i = 1; i < t.samples.size(); ++i) {
    if (static_cast<double>(t.samples[i]) <= static_cast<double>(t.samples[i - 1]) + step) {
      return false;
    }
  }
  if (static_cast<double>(bytes) < base * (1 + options_.min_growth)) return false;
  t.flagged = true;
  return true;
}

void LeakDetector::Forget(const std::string& id) { tracks_.erase(id); }

void LeakDetector::ForgetMissing(const std::string& prefix, const std::set<std::string>& keep) {
  for (auto it = tracks_.lower_bound(prefix);
       it != tracks_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    it = keep.count(it->first) > 0 ? std::next(it) : tracks_.erase(it);
  }
}

bool LeakDetector::Flagged(const std::string& id, uint64_t generation) const {
  auto it = tracks_.find(id);
  return it != tracks_.end() && it->second.flagged && it->second.generation == generation;
}

std::vector<std::string> LeakDetector::FlaggedIds() const {
  std::vector<std::string> out;
  for (const auto& [id, t] : tracks_) {
    if (t.flagged) out.push_back(id);
  }
  return out;
}

double LeakDetector::Growth(const std::string& id) const {
  auto it = tracks_.find(id);
  if (it == tracks_.end() || it->second.samples.empty() || it->second.baseline == 0) return 0;
  return static_cast<double>(it->second.samples.back()) / static_cast<double>(it->second.baseline) -
         1;
}

}  // namespace exa::scheduler
