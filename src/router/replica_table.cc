#include "router/replica_table.h"

#include <algorithm>

#include <set>

#include "common/prefix_delta.h"
#include "common/strings.h"

namespace exa::router {

std::string LabelValue(const ReplicaInfo& info, const std::string& key) {
  auto it = info.labels.find(key);
  if (it != info.labels.end()) return it->second;
  return key == "version" ? info.version : std::string();
}

void ReplicaTable::AddToPool(Entry* e) { pools_[e->snap.info.model].push_back(e); }

void ReplicaTable::RemoveFromPool(Entry* e) {
  auto it = pools_.find(e->snap.info.model);
  if (it == pools_.end()) return;
  std::vector<Entry*>& pool = it->second;
  pool.erase(std::remove(pool.begin(), pool.end(), e), pool.end());
  if (pool.empty()) pools_.erase(it);
}

void ReplicaTable::Upsert(const ReplicaInfo& info) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = replicas_.try_emplace(info.id);
  Entry& e = it->second;
  if (!inserted && e.snap.info.model == info.model) {
    e.snap.info = info;
    return;
  }
  if (!inserted) RemoveFromPool(&e);
  e.snap.info = info;
  AddToPool(&e);
}

void ReplicaTable::Remove(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  RemoveFromPool(&it->second);
  replicas_.erase(it);
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

// For a member of the request's model's pool.
bool ReplicaTable::Eligible(const Entry& e, const RouteRequest& request) {
  if (!e.snap.report.ready || !e.snap.healthy || e.snap.ejected) return false;
  if (!request.version.empty() && e.snap.info.version != request.version) return false;
  if (!request.exclude.empty() && std::find(request.exclude.begin(), request.exclude.end(),
                                            e.snap.info.id) != request.exclude.end()) {
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

void ReplicaTable::MarkHolders(const RouteRequest& request, uint64_t decision) {
  // Only the request's model's namespaces (of its version, when pinned): a prompt's tokens mean
  // nothing to another model's cache.
  const auto chain_for = [&request](const std::string& ns) -> std::span<const Hash128> {
    if (!CacheNamespaceOf(ns, request.model, request.version)) return {};
    return request.block_hashes(ns);
  };
  std::vector<std::pair<std::string, int32_t>> holders;
  prefix_index_->Matches(chain_for, [&holders](const std::string& id, int32_t blocks) {
    holders.emplace_back(id, blocks);
  });
  for (const auto& [id, blocks] : holders) {
    auto it = replicas_.find(id);
    if (it == replicas_.end() || it->second.snap.info.model != request.model) continue;
    it->second.match_decision = decision;
    it->second.match_blocks = blocks;
  }
}

std::vector<Candidate> ReplicaTable::Candidates(const std::vector<Entry*>& eligible,
                                                const RouteRequest& request,
                                                uint64_t decision) const {
  std::vector<Candidate> candidates;
  candidates.reserve(eligible.size());
  for (const Entry* e : eligible) {
    const int64_t cached =
        e->match_decision == decision ? int64_t{e->match_blocks} * request.block_tokens : 0;
    candidates.push_back({e->snap.report.pending_tokens, e->snap.dispatched_tokens,
                          e->snap.report.sequences, e->dispatched_requests, e->snap.open_requests,
                          e->snap.report.waiting, e->snap.report.slots, cached});
  }
  return candidates;
}

absl::StatusOr<std::string> ReplicaTable::Choose(const RouteRequest& request) {
  absl::MutexLock lock(&mu_);
  std::vector<Entry*> eligible;
  if (auto pool = pools_.find(request.model); pool != pools_.end()) {
    eligible.reserve(pool->second.size());
    for (Entry* e : pool->second) {
      if (Eligible(*e, request)) eligible.push_back(e);
    }
  }
  if (eligible.empty()) return NoReplica(request);
  const uint64_t decision = ++marked_decisions_;
  if (policy_ == Policy::kKvTokenAware && prefix_index_ != nullptr &&
      request.block_hashes != nullptr) {
    MarkHolders(request, decision);
  }
  const std::vector<Candidate> candidates = Candidates(eligible, request, decision);
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
