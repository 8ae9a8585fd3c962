#include "scheduler/leak_detector.h"

#include <algorithm>

namespace exa::scheduler {

std::pair<absl::string_view, absl::string_view> LeakDetector::Split(std::string_view id) {
  const absl::string_view v(id.data(), id.size());  // absl's maps hash absl::string_view
  const size_t slash = v.find('/');
  const size_t cut = slash == absl::string_view::npos ? 0 : slash + 1;
  return {v.substr(0, cut), v.substr(cut)};
}

const LeakDetector::Track* LeakDetector::Find(std::string_view id) const {
  const auto [group, rest] = Split(id);
  auto g = groups_.find(group);
  if (g == groups_.end()) return nullptr;
  auto t = g->second.find(rest);
  return t == g->second.end() ? nullptr : &t->second;
}

bool LeakDetector::Observe(const std::string& id, uint64_t generation, absl::Time now,
                           uint64_t bytes) {
  const auto [group, rest] = Split(id);
  auto g = groups_.find(group);
  Track* found = nullptr;
  if (g != groups_.end()) {
    auto t = g->second.find(rest);
    if (t != g->second.end()) found = &t->second;
  }
  if (found == nullptr || found->generation != generation) {
    if (found == nullptr && size_ >= options_.max_replicas) return false;
    if (found == nullptr) {
      found = &groups_[group][rest];
      ++size_;
    }
    *found = Track{};
    found->generation = generation;
    found->baseline = bytes;
    found->last = now;
    found->samples = {bytes};
    return false;
  }
  Track& t = *found;
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

void LeakDetector::Forget(const std::string& id) {
  const auto [group, rest] = Split(id);
  auto g = groups_.find(group);
  if (g == groups_.end()) return;
  size_ -= g->second.erase(rest);
  if (g->second.empty()) groups_.erase(g);
}

void LeakDetector::ForgetMissing(std::string_view group,
                                 const absl::flat_hash_set<std::string>& keep) {
  auto g = groups_.find(absl::string_view(group.data(), group.size()));
  if (g == groups_.end()) return;
  std::string id(group);  // one buffer for every "group" + rest: no allocation per replica
  for (auto it = g->second.begin(); it != g->second.end();) {
    id.resize(group.size());
    id.append(it->first);
    if (keep.contains(id)) {
      ++it;
    } else {
      g->second.erase(it++);
      --size_;
    }
  }
  if (g->second.empty()) groups_.erase(g);
}

bool LeakDetector::Flagged(const std::string& id, uint64_t generation) const {
  const Track* t = Find(id);
  return t != nullptr && t->flagged && t->generation == generation;
}

std::vector<std::string> LeakDetector::FlaggedIds() const {
  std::vector<std::string> out;
  for (const auto& [group, tracks] : groups_) {
    for (const auto& [rest, t] : tracks) {
      if (t.flagged) out.push_back(group + rest);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

double LeakDetector::Growth(const std::string& id) const {
  const Track* t = Find(id);
  if (t == nullptr || t->samples.empty() || t->baseline == 0) return 0;
  return static_cast<double>(t->samples.back()) / static_cast<double>(t->baseline) - 1;
}

}  // namespace exa::scheduler
