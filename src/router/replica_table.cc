#include "router/replica_table.h"

#include <algorithm>

#include <set>

#include "common/strings.h"

namespace exa::router {

std::string LabelValue(const ReplicaInfo& info, const std::string& key) {
  auto it = info.labels.find(key);
  if (it != info.labels.end()) return it->second;
  return key == "version" ? info.version : std::string();
}

void ReplicaTable::Upsert(const ReplicaInfo& info) {
  absl::MutexLock lock(&mu_);
  replicas_[info.id].snap.info = info;
}

void ReplicaTable::Remove(const std::string& id) {
  absl::MutexLock lock(&mu_);
  replicas_.erase(id);
}

void ReplicaTable::Report(const std::string& id, const LoadReport& report) {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  it->second.snap.report = report;
  it->second.snap.dispatched_tokens = 0;
  it->second.dispatched_requests = 0;
}

void ReplicaTable::SetEjected(const std::string& id, bool ejected) {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(id);
  if (it != replicas_.end()) it->second.snap.ejected = ejected;
}

void ReplicaTable::SetPrefixIndex(const PrefixIndex* index) {
  absl::MutexLock lock(&mu_);
  prefix_index_ = index;
}

void ReplicaTable::SetHealthy(const std::string& id, bool healthy) {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(id);
  if (it != replicas_.end()) it->second.snap.healthy = healthy;
}

bool ReplicaTable::Eligible(const std::string& id, const Entry& e, const RouteRequest& request) {
  if (e.snap.info.model != request.model) return false;
  if (!request.version.empty() && e.snap.info.version != request.version) return false;
  if (!e.snap.report.ready || !e.snap.healthy || e.snap.ejected) return false;
  if (std::find(request.exclude.begin(), request.exclude.end(), id) != request.exclude.end()) {
    return false;
  }
  for (const auto& [key, value] : request.labels) {
    if (LabelValue(e.snap.info, key) != value) return false;
  }
  return true;
}

// Why no replica qualifies: the model, the version or the labels are missing (NOT_FOUND, naming
// what exists), or none is ready and healthy (UNAVAILABLE). Only on this path, not per request.
absl::Status ReplicaTable::NoReplica(const RouteRequest& request) const {
  auto join = [](const std::set<std::string>& s) {
    std::string out;
    for (const auto& v : s) StrAppend(&out, out.empty() ? "" : ", ", v);
    return out.empty() ? std::string("none") : out;
  };
  std::set<std::string> models, versions;
  for (const auto& [id, e] : replicas_) {
    models.insert(e.snap.info.model);
    if (e.snap.info.model == request.model) versions.insert(e.snap.info.version);
  }
  if (models.count(request.model) == 0) {
    return absl::NotFoundError(
        StrCat("model \"", request.model, "\": not served here; available: ", join(models)));
  }
  if (!request.version.empty() && versions.count(request.version) == 0) {
    return absl::NotFoundError(StrCat("version \"", request.version, "\" of model \"",
                                      request.model,
                                      "\": not served; available: ", join(versions)));
  }
  if (!request.labels.empty()) {
    std::string want;
    for (const auto& [k, v] : request.labels) StrAppend(&want, want.empty() ? "" : ",", k, "=", v);
    bool any_labelled = false;
    std::set<std::string> present;  // the label sets the model's replicas do carry
    for (const auto& [id, e] : replicas_) {
      if (e.snap.info.model != request.model) continue;
      bool match = true;
      std::string labels;
      for (const auto& [k, v] : request.labels) {
        const std::string value = LabelValue(e.snap.info, k);
        match &= value == v;
        StrAppend(&labels, labels.empty() ? "" : ",", k, "=", value.empty() ? "(none)" : value);
      }
      any_labelled |= match;
      present.insert(std::move(labels));
    }
    if (!any_labelled) {
      return absl::NotFoundError(StrCat("model \"", request.model, "\": no replica labelled ", want,
                                        "; its replicas have ", join(present)));
    }
  }
  return absl::UnavailableError(
      StrCat("model \"", request.model, "\": no ready and healthy replica"));
}

std::vector<Candidate> ReplicaTable::Candidates(const std::vector<Entry*>& eligible,
                                                const RouteRequest& request) const {
  std::vector<Candidate> candidates;
  candidates.reserve(eligible.size());
  const PrefixIndex* index = prefix_index_;
  const bool affinity =
      policy_ == Policy::kKvTokenAware && index != nullptr && request.block_hashes != nullptr;
  std::vector<std::pair<std::string, std::span<const Hash128>>> chains;  // one per namespace
  const auto chain_for = [&](const std::string& id) -> std::span<const Hash128> {
    const std::string ns = index->State(id).cache_namespace;
    for (const auto& [name, chain] : chains) {
      if (name == ns) return chain;
    }
    chains.emplace_back(ns, request.block_hashes(ns));
    return chains.back().second;
  };
  for (const Entry* e : eligible) {
    Candidate c{e->snap.report.pending_tokens, e->snap.dispatched_tokens,
                e->snap.report.sequences,      e->dispatched_requests,
                e->snap.open_requests,         e->snap.report.waiting,
                e->snap.report.slots,          0};
    if (affinity) {
      c.cached_tokens = int64_t{index->MatchedBlocks(e->snap.info.id, chain_for(e->snap.info.id))} *
                        request.block_tokens;
    }
    candidates.push_back(c);
  }
  return candidates;
}

absl::StatusOr<std::string> ReplicaTable::Choose(const RouteRequest& request) {
  absl::MutexLock lock(&mu_);
  std::vector<Entry*> eligible;
  for (auto& [id, e] : replicas_) {
    if (Eligible(id, e, request)) eligible.push_back(&e);
  }
  if (eligible.empty()) return NoReplica(request);
  const std::vector<Candidate> candidates = Candidates(eligible, request);
  auto pick = Pick(policy_, candidates, request.prompt_tokens, options_, state_, random_);
  Entry* chosen = eligible[*pick];
  // The work this dispatch adds: what the replica must prefill of the prompt.
  const int64_t prompt = std::max<int64_t>(0, request.prompt_tokens);
  const int64_t cached = std::clamp<int64_t>(candidates[*pick].cached_tokens, 0, prompt);
  chosen->snap.dispatched_tokens += prompt - cached;
  chosen->dispatched_requests++;
  chosen->snap.open_requests++;
  decisions_.total++;
  decisions_.with_cache += cached > 0 ? 1 : 0;
  decisions_.prompt_tokens += static_cast<uint64_t>(prompt);
  decisions_.cached_tokens += static_cast<uint64_t>(cached);
  return chosen->snap.info.id;
}

void ReplicaTable::Complete(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(id);
  if (it != replicas_.end() && it->second.snap.open_requests > 0) it->second.snap.open_requests--;
}

ReplicaTable::Decisions ReplicaTable::decisions() const {
  absl::MutexLock lock(&mu_);
  return decisions_;
}

std::vector<ReplicaSnapshot> ReplicaTable::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<ReplicaSnapshot> out;
  for (const auto& [id, e] : replicas_) out.push_back(e.snap);
  return out;
}

std::vector<std::string> ReplicaTable::Models() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> models;
  for (const auto& [id, e] : replicas_) models.insert(e.snap.info.model);
  return {models.begin(), models.end()};
}

}  // namespace exa::router
