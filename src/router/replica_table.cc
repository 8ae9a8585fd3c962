#include "router/replica_table.h"

#include <algorithm>

#include <set>

#include "common/prefix_delta.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::router {

std::string LabelValue(const ReplicaInfo& info, const std::string& key) {
  auto it = info.labels.find(key);
  if (it != info.labels.end()) return it->second;
  return key == "version" ? info.version : std::string();
}

Candidate ReplicaTable::CandidateOf(const Entry& e, int64_t cached_tokens) {
  return {e.snap.report.pending_tokens, e.snap.dispatched_tokens,
          e.snap.report.sequences,      e.dispatched_requests,
          e.snap.open_requests,         e.snap.report.waiting,
          e.snap.report.slots,          cached_tokens};
}

bool ReplicaTable::Routable(const Entry& e) {
  return e.snap.report.ready && e.snap.healthy && !e.snap.ejected;
}

void ReplicaTable::Account(const Entry& e, int64_t sign, TierSums& sums) {
  sums.pending += sign * std::max<int64_t>(0, e.snap.report.pending_tokens);
  sums.sequences += sign * std::max<int32_t>(0, e.snap.report.sequences);
  sums.dispatched_tokens += sign * e.snap.dispatched_tokens;
  sums.dispatched_requests += sign * e.dispatched_requests;
}

void ReplicaTable::Link(Entry* e) {
  if (!Routable(*e)) return;
  Pool& pool = pools_[e->snap.info.model];
  e->tier = KvTier(CandidateOf(*e, 0));
  auto& members = pool.tiers[static_cast<size_t>(e->tier)];
  e->tier_pos = members.size();
  members.push_back(e);
  Account(*e, 1, pool.sums[static_cast<size_t>(e->tier)]);
  Account(*e, 1, pool.routable);
}

void ReplicaTable::Unlink(Entry* e) {
  if (e->tier < 0) return;
  Pool& pool = pools_[e->snap.info.model];
  auto& members = pool.tiers[static_cast<size_t>(e->tier)];
  members[e->tier_pos] = members.back();
  members[e->tier_pos]->tier_pos = e->tier_pos;
  members.pop_back();
  Account(*e, -1, pool.sums[static_cast<size_t>(e->tier)]);
  Account(*e, -1, pool.routable);
  e->tier = -1;
}

void ReplicaTable::AddToPool(Entry* e) {
  pools_[e->snap.info.model].all.push_back(e);
  Link(e);
}

void ReplicaTable::RemoveFromPool(Entry* e) {
  Unlink(e);
  auto it = pools_.find(e->snap.info.model);
  if (it == pools_.end()) return;
  std::vector<Entry*>& all = it->second.all;
  all.erase(std::remove(all.begin(), all.end(), e), all.end());
  if (all.empty()) pools_.erase(it);
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
  if (inserted) e.snap.ejected = ejected_.contains(info.id);
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
  Entry& e = it->second;
  Unlink(&e);
  e.snap.report = report;
  const uint64_t counted = report.admitted_dispatch.value_or(UINT64_MAX);
  while (!e.unreported.empty() && e.unreported.front().number <= counted) {
    e.snap.dispatched_tokens -= e.unreported.front().tokens;
    e.dispatched_requests--;
    e.unreported.pop_front();
  }
  Link(&e);
}

void ReplicaTable::SetEjected(const std::string& id, bool ejected) {
  absl::MutexLock lock(&mu_);
  if (!ejected) {
    ejected_.erase(id);
  } else if (replicas_.contains(id)) {
    if (ejected_.size() >= kMaxEjectedIds) {  // forget the ids no longer in the table
      for (auto x = ejected_.begin(); x != ejected_.end();) {
        if (replicas_.contains(*x)) {
          ++x;
        } else {
          ejected_.erase(x++);
        }
      }
    }
    if (ejected_.size() < kMaxEjectedIds) ejected_.insert(id);
  }
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  Unlink(&it->second);
  it->second.snap.ejected = ejected;
  Link(&it->second);
}

void ReplicaTable::SetPrefixIndex(const PrefixIndex* index) {
  absl::MutexLock lock(&mu_);
  prefix_index_ = index;
}

void ReplicaTable::SetHealthy(const std::string& id, bool healthy) {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  Unlink(&it->second);
  it->second.snap.healthy = healthy;
  Link(&it->second);
}

// For a member of the request's model's pool.
bool ReplicaTable::Eligible(const Entry& e, const RouteRequest& request) {
  if (!Routable(e)) return false;
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

std::vector<PrefixIndex::Match> ReplicaTable::FindHolders(const RouteRequest& request) const {
  const PrefixIndex* index = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (policy_ == Policy::kKvTokenAware) index = prefix_index_;
  }
  if (index == nullptr || request.block_hashes == nullptr) return {};
  // Only the request's model's namespaces (of its version, when pinned): a prompt's tokens mean
  // nothing to another model's cache.
  return index->Matches([&request](const std::string& ns, size_t blocks) {
    if (!CacheNamespaceOf(ns, request.model, request.version)) return std::span<const Hash128>();
    return request.block_hashes(ns, blocks);
  });
}

std::vector<std::pair<ReplicaTable::Entry*, int32_t>> ReplicaTable::MarkHolders(
    const std::vector<PrefixIndex::Match>& found, const std::string& model, uint64_t decision) {
  std::vector<std::pair<Entry*, int32_t>> holders;
  for (const PrefixIndex::Match& m : found) {
    auto it = replicas_.find(m.replica);
    if (it == replicas_.end() || it->second.snap.info.model != model) continue;
    it->second.match_decision = decision;
    it->second.match_blocks = m.blocks;
    holders.emplace_back(&it->second, m.blocks);
  }
  return holders;
}

ReplicaTable::Entry* ReplicaTable::ChooseFromTiers(
    Pool& pool, const RouteRequest& request, uint64_t decision,
    const std::vector<std::pair<Entry*, int32_t>>& holders, int64_t* cached_tokens) {
  size_t tier = 0;
  while (tier < pool.tiers.size() && pool.tiers[tier].empty()) ++tier;
  if (tier == pool.tiers.size()) return nullptr;
  const std::vector<Entry*>& members = pool.tiers[tier];
  const TierSums& sums = pool.sums[tier];
  KvTierStats stats;
  stats.per_request =
      pool.routable.sequences > 0 ? pool.routable.pending / pool.routable.sequences : 0;
  stats.mean_queue = static_cast<double>(sums.pending + sums.dispatched_tokens +
                                         sums.dispatched_requests * stats.per_request) /
                     static_cast<double>(members.size());
  // The same draws as Pick's kv-token-aware: two distinct members of the best tier.
  std::vector<Entry*> sampled;
  for (size_t i : TwoDistinct(members.size(), random_)) sampled.push_back(members[i]);
  const size_t draws = sampled.size();
  std::vector<Candidate> view;
  for (Entry* e : sampled) view.push_back(CandidateOf(*e, 0));
  std::vector<Entry*> in_tier;
  std::vector<int64_t> cached;
  for (auto [e, blocks] : holders) {
    if (e->tier != static_cast<int>(tier)) continue;
    in_tier.push_back(e);
    cached.push_back(int64_t{blocks} * request.block_tokens);
  }
  for (size_t h : AffinityHolders(cached, random_)) {
    sampled.push_back(in_tier[h]);
    view.push_back(CandidateOf(*in_tier[h], cached[h]));
  }
  for (size_t i = 0; i < draws; ++i) {  // a draw may hold part of the prompt too
    if (sampled[i]->match_decision == decision) {
      view[i].cached_tokens = int64_t{sampled[i]->match_blocks} * request.block_tokens;
    }
  }
  const size_t pick = KvPick(view, draws, request.prompt_tokens, stats, options_);
  *cached_tokens = view[pick].cached_tokens;
  return sampled[pick];
}

ReplicaTable::Entry* ReplicaTable::ChooseByPass(Pool& pool, const RouteRequest& request,
                                                uint64_t decision, int64_t* cached_tokens) {
  std::vector<Entry*> eligible;
  eligible.reserve(pool.all.size());
  for (Entry* e : pool.all) {
    if (Eligible(*e, request)) eligible.push_back(e);
  }
  if (eligible.empty()) return nullptr;
  std::vector<Candidate> candidates;
  candidates.reserve(eligible.size());
  for (const Entry* e : eligible) {
    candidates.push_back(CandidateOf(
        *e, e->match_decision == decision ? int64_t{e->match_blocks} * request.block_tokens : 0));
  }
  const auto pick = Pick(policy_, candidates, request.prompt_tokens, options_, state_, random_);
  *cached_tokens = candidates[*pick].cached_tokens;
  return eligible[*pick];
}

absl::StatusOr<std::string> ReplicaTable::Choose(const RouteRequest& request) {
  EXA_ASSIGN_OR_RETURN(Choice choice, ChooseFor(request));
  return std::move(choice.replica);
}

absl::StatusOr<ReplicaTable::Choice> ReplicaTable::ChooseFor(const RouteRequest& request) {
  // Hashing the prompt and asking the index happen before the table's lock is taken.
  const std::vector<PrefixIndex::Match> found = FindHolders(request);
  absl::MutexLock lock(&mu_);
  auto pool = pools_.find(request.model);
  if (pool == pools_.end()) return NoReplica(request);
  const uint64_t decision = ++marked_decisions_;
  const auto holders = MarkHolders(found, request.model, decision);
  const bool unpinned =
      request.version.empty() && request.labels.empty() && request.exclude.empty();
  int64_t cached = 0;
  Entry* chosen = policy_ == Policy::kKvTokenAware && unpinned
                      ? ChooseFromTiers(pool->second, request, decision, holders, &cached)
                      : ChooseByPass(pool->second, request, decision, &cached);
  if (chosen == nullptr) return NoReplica(request);
  // The work this dispatch adds: what the replica must prefill of the prompt.
  const int64_t prompt = std::max<int64_t>(0, request.prompt_tokens);
  cached = std::clamp<int64_t>(cached, 0, prompt);
  const Pool& p = pool->second;
  const int64_t per_request =
      p.routable.sequences > 0 ? p.routable.pending / p.routable.sequences : 0;
  Choice choice{.replica = chosen->snap.info.id,
                .cached_tokens = cached,
                .tokens_ahead = KvQueue(CandidateOf(*chosen, 0), per_request) + prompt - cached,
                .dispatch = ++dispatches_};
  Unlink(chosen);
  chosen->unreported.push_back({choice.dispatch, prompt - cached});
  chosen->snap.dispatched_tokens += prompt - cached;
  chosen->dispatched_requests++;
  chosen->snap.open_requests++;
  Link(chosen);
  decisions_.total++;
  decisions_.with_cache += cached > 0 ? 1 : 0;
  decisions_.prompt_tokens += static_cast<uint64_t>(prompt);
  decisions_.cached_tokens += static_cast<uint64_t>(cached);
  return choice;
}

void ReplicaTable::Complete(const std::string& id, uint64_t dispatch) {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  Entry& e = it->second;
  if (e.snap.open_requests > 0) e.snap.open_requests--;
  auto d = std::find_if(e.unreported.begin(), e.unreported.end(),
                        [&](const Dispatch& u) { return u.number == dispatch; });
  if (dispatch == 0 || d == e.unreported.end()) return;
  Unlink(&e);
  e.snap.dispatched_tokens -= d->tokens;
  e.dispatched_requests--;
  e.unreported.erase(d);
  Link(&e);
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

ReplicaStanding ReplicaTable::StandingOf(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return {};
  const ReplicaSnapshot& s = it->second.snap;
  return {true, s.healthy, s.ejected, s.report.itl_p99_ms, s.report.ttft_p99_ms};
}

std::string ReplicaTable::CheckInvariants() const {
  absl::MutexLock lock(&mu_);
  std::string err;
  for (const auto& [model, pool] : pools_) {
    std::array<TierSums, 3> sums{};
    TierSums routable;
    std::array<size_t, 3> members{};
    for (const Entry* e : pool.all) {
      const int tier = Routable(*e) ? KvTier(CandidateOf(*e, 0)) : -1;
      if (e->tier != tier) {
        StrAppend(&err, e->snap.info.id, ": tier ", e->tier, ", want ", tier, "; ");
      }
      if (tier < 0) continue;
      const auto t = static_cast<size_t>(tier);
      const auto& list = pool.tiers[t];
      if (e->tier_pos >= list.size() || list[e->tier_pos] != e) {
        StrAppend(&err, e->snap.info.id, ": not at its place in tier ", tier, "; ");
      }
      members[t]++;
      Account(*e, 1, sums[t]);
      Account(*e, 1, routable);
    }
    for (size_t t = 0; t < 3; ++t) {
      if (pool.tiers[t].size() != members[t] || !(pool.sums[t] == sums[t])) {
        StrAppend(&err, model, ": tier ", t, " list or sums disagree; ");
      }
    }
    if (!(pool.routable == routable)) StrAppend(&err, model, ": pool sums disagree; ");
  }
  return err;
}

bool ReplicaTable::HasRoutable(std::string_view model) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, e] : replicas_) {
    if (e.snap.info.model == model && Routable(e)) return true;
  }
  return false;
}

std::vector<std::string> ReplicaTable::Models() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> models;
  for (const auto& [id, e] : replicas_) models.insert(e.snap.info.model);
  return {models.begin(), models.end()};
}

}  // namespace exa::router
