#include "node/admitted_dispatches.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"

namespace exa::node {

void AdmittedDispatches::Note(const std::string& replica, uint64_t dispatcher, uint64_t dispatch) {
  if (dispatcher == 0 || dispatch == 0) return;
  absl::MutexLock lock(&mu_);
  auto& of_replica = marks_[replica];
  auto it = of_replica.find(dispatcher);
  if (it == of_replica.end()) {
    if (of_replica.size() >= kMaxDispatchers) {
      auto oldest = std::min_element(
          of_replica.begin(), of_replica.end(),
          [](const auto& a, const auto& b) { return a.second.heard < b.second.heard; });
      of_replica.erase(oldest);
    }
    it = of_replica.emplace(dispatcher, Mark{}).first;
  }
  // Requests from one gateway may arrive out of order: the mark only rises.
  it->second.dispatch = std::max(it->second.dispatch, dispatch);
  it->second.heard = ++notes_;
}

std::shared_ptr<const AdmittedDispatches::Marks> AdmittedDispatches::Snapshot(
    std::span<const std::string> replicas) {
  auto out = std::make_shared<Marks>();
  absl::MutexLock lock(&mu_);
  if (marks_.size() > replicas.size()) {
    const absl::flat_hash_set<std::string> live(replicas.begin(), replicas.end());
    absl::erase_if(marks_, [&](const auto& kv) { return !live.contains(kv.first); });
  }
  for (const std::string& id : replicas) {
    auto it = marks_.find(id);
    if (it == marks_.end()) continue;
    auto& copy = (*out)[id];
    for (const auto& [dispatcher, mark] : it->second) copy[dispatcher] = mark.dispatch;
  }
  return out;
}

uint64_t AdmittedOf(const AdmittedDispatches::Marks& marks, const std::string& replica,
                    uint64_t dispatcher) {
  auto it = marks.find(replica);
  if (it == marks.end()) return 0;
  auto d = it->second.find(dispatcher);
  return d == it->second.end() ? 0 : d->second;
}

}  // namespace exa::node
