#include "router/policy.h"

#include <algorithm>
#include <limits>

#include "common/strings.h"

namespace exa::router {
namespace {

constexpr std::pair<Policy, std::string_view> kNames[] = {
    {Policy::kKvTokenAware, "kv-token-aware"},
    {Policy::kTokenAware, "token-aware"},
    {Policy::kLeastConnections, "least-connections"},
    {Policy::kLeastRequests, "least-requests"},
    {Policy::kRoundRobin, "round-robin"},
    {Policy::kRandom, "random"},
};

// The cheapest index by `cost`, ties broken by a random draw among all the minima.
template <typename Cost>
size_t ArgMinRandomTie(const std::vector<Candidate>& c, Cost cost, Random& random) {
  int64_t best = std::numeric_limits<int64_t>::max();
  std::vector<size_t> ties;
  for (size_t i = 0; i < c.size(); ++i) {
    int64_t v = cost(c[i]);
    if (v < best) {
      best = v;
      ties.assign(1, i);
    } else if (v == best) {
      ties.push_back(i);
    }
  }
  return ties[random.Uniform(ties.size())];
}

// What one more request adds besides its prompt: the decode tokens it is expected to produce,
// the pool's reported pending tokens per sequence (see TokenAware).
int64_t PerRequestDecode(const std::vector<Candidate>& c) {
  int64_t pool_pending = 0, pool_sequences = 0;
  for (const Candidate& x : c) {
    pool_pending += std::max<int64_t>(0, x.reported_pending_tokens);
    pool_sequences += std::max<int32_t>(0, x.reported_sequences);
  }
  return pool_sequences > 0 ? pool_pending / pool_sequences : 0;
}

size_t TokenAware(const std::vector<Candidate>& c, int64_t prompt_tokens,
                  const PolicyOptions& options, Random& random) {
  // What one more request adds besides its prompt: the decode tokens it is expected to produce.
  // The router never sees output lengths, so it takes the pool's reported pending tokens per
  // sequence (the replicas' own history-based estimates). Without it a request dispatched since
  // the last report would count only its prompt, and every gateway would keep sending to the
  // replica that looked cheapest at the report, for the whole report period (herding).
  const int64_t per_request = PerRequestDecode(c);
  // A replica that reported requests waiting is saturated (no batch slot or KV free): a new
  // request would queue there however few tokens it owes. Pending tokens measure work, not
  // slots, so skip saturated replicas while any other is eligible.
  const bool any_unsaturated =
      std::any_of(c.begin(), c.end(), [](const Candidate& x) { return x.reported_waiting <= 0; });
  std::vector<int64_t> cost(c.size());
  int64_t best = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < c.size(); ++i) {
    cost[i] = std::max<int64_t>(0, c[i].reported_pending_tokens) + c[i].dispatched_tokens +
              int64_t{c[i].dispatched_requests} * per_request + prompt_tokens;
    if (any_unsaturated && c[i].reported_waiting > 0) cost[i] = std::numeric_limits<int64_t>::max();
    best = std::min(best, cost[i]);
  }
  // Near-equal: within a fraction of the cheapest, or within this request's own prompt. Backlogs
  // that differ by less than the prompt matter less to its first token than how fast the replica
  // prefills (its free batch budget, its step time), which the draw below judges by sequences.
  // Measured (`exaserve-bench route --mode sim`, seeds 1-3): P99 TTFT ahead of
  // least-connections in 9 of 12 (seed, rho) pairs, against 3 of 12 without the prompt term.
  const int64_t slack =
      std::max({options.near_equal_tokens, static_cast<int64_t>(best * options.near_equal_fraction),
                prompt_tokens});
  std::vector<size_t> near;
  for (size_t i = 0; i < c.size(); ++i) {
    if (cost[i] <= best + slack) near.push_back(i);
  }
  if (near.size() == 1) return near[0];
  // Power of two choices among the near-equal: two random draws; keep the one with more free
  // batch slots (fewer sequences, its dispatches since the report counted), then the cheaper.
  size_t a = near[random.Uniform(near.size())];
  size_t b = near[random.Uniform(near.size())];
  const auto sequences = [&](size_t i) {
    return int64_t{c[i].reported_sequences} + c[i].dispatched_requests;
  };
  if (sequences(a) != sequences(b)) return sequences(b) < sequences(a) ? b : a;
  return cost[b] < cost[a] ? b : a;
}

size_t KvTokenAware(const std::vector<Candidate>& c, int64_t prompt_tokens,
                    const PolicyOptions& options, Random& random) {
  KvTierStats stats;
  stats.per_request = PerRequestDecode(c);
  int best_tier = 2;
  for (const Candidate& x : c) best_tier = std::min(best_tier, KvTier(x));
  std::vector<size_t> members;
  int64_t queue_sum = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (KvTier(c[i]) != best_tier) continue;
    members.push_back(i);
    queue_sum += KvQueue(c[i], stats.per_request);
  }
  stats.mean_queue = static_cast<double>(queue_sum) / static_cast<double>(members.size());
  // Power of two choices over the tier: two distinct random members (with one: it).
  std::vector<size_t> sampled;
  for (size_t i : TwoDistinct(members.size(), random)) sampled.push_back(members[i]);
  const size_t draws = sampled.size();
  std::vector<size_t> holders;
  std::vector<int64_t> cached;
  for (size_t i : members) {
    if (c[i].cached_tokens <= 0) continue;
    holders.push_back(i);
    cached.push_back(c[i].cached_tokens);
  }
  for (size_t h : AffinityHolders(cached, random)) sampled.push_back(holders[h]);
  std::vector<Candidate> view;
  view.reserve(sampled.size());
  for (size_t i : sampled) view.push_back(c[i]);
  return sampled[KvPick(view, draws, prompt_tokens, stats, options)];
}

}  // namespace

int KvTier(const Candidate& c) {
  // A request sent where no slot is free waits for a running one to end, however few tokens it
  // owes.
  if (c.reported_waiting > 0) return 2;
  const int64_t sequences = int64_t{c.reported_sequences} + c.dispatched_requests;
  return c.slots > 0 && sequences >= c.slots ? 1 : 0;
}

int64_t KvQueue(const Candidate& c, int64_t per_request) {
  return std::max<int64_t>(0, c.reported_pending_tokens) + c.dispatched_tokens +
         int64_t{c.dispatched_requests} * per_request;
}

size_t KvPick(std::span<const Candidate> sampled, size_t draws, int64_t prompt_tokens,
              const KvTierStats& stats, const PolicyOptions& options) {
  // Bounded load for affinity: a replica whose queue is over the bound gets no credit for the
  // prefix it holds, so a hot prefix never piles onto one replica.
  const double hot =
      options.affinity_load_bound * stats.mean_queue + static_cast<double>(prompt_tokens);
  std::vector<int64_t> cost(sampled.size()), uncached(sampled.size());
  for (size_t i = 0; i < sampled.size(); ++i) {
    const int64_t queue = KvQueue(sampled[i], stats.per_request);
    const int64_t cached = static_cast<double>(queue) > hot
                               ? 0
                               : std::clamp<int64_t>(sampled[i].cached_tokens, 0, prompt_tokens);
    uncached[i] = prompt_tokens - cached;
    cost[i] = queue + uncached[i];
  }
  const auto sequences = [&](size_t i) {
    return int64_t{sampled[i].reported_sequences} + sampled[i].dispatched_requests;
  };
  // The cheaper draw (then the one with more free slots): many gateways acting on the same
  // stale report all see the same cheapest replica; a random pair spreads them (Mitzenmacher,
  // "How useful is old information?").
  size_t pick = 0;
  if (draws > 1 && (cost[1] < cost[0] || (cost[1] == cost[0] && sequences(1) < sequences(0)))) {
    pick = 1;
  }
  // The cheapest replica holding part of this prompt challenges the draw: saved prefill is work
  // not done, and the bound above already kept hot replicas out.
  size_t holder = sampled.size();
  for (size_t i = draws; i < sampled.size(); ++i) {
    if (uncached[i] + options.near_equal_tokens >= prompt_tokens) continue;
    if (holder == sampled.size() || cost[i] < cost[holder]) holder = i;
  }
  if (holder != sampled.size() && cost[holder] < cost[pick]) pick = holder;
  return pick;
}

std::vector<size_t> AffinityHolders(std::span<const int64_t> cached, Random& random) {
  int64_t longest = 0;
  for (int64_t c : cached) longest = std::max(longest, c);
  std::vector<size_t> near;
  for (size_t i = 0; i < cached.size(); ++i) {
    if (cached[i] > 0 && cached[i] * 4 >= longest * 3) near.push_back(i);
  }
  if (near.size() <= 2) return near;
  std::vector<size_t> two = TwoDistinct(near.size(), random);
  for (size_t& i : two) i = near[i];
  return two;
}

std::vector<size_t> TwoDistinct(size_t n, Random& random) {
  if (n == 0) return {};
  const size_t first = random.Uniform(n);
  if (n == 1) return {first};
  return {first, (first + 1 + random.Uniform(n - 1)) % n};
}

absl::StatusOr<Policy> ParsePolicy(std::string_view name) {
  for (const auto& [policy, text] : kNames) {
    if (text == name) return policy;
  }
  return absl::InvalidArgumentError(
      StrCat("routing policy \"", name,
             "\": expected kv-token-aware, token-aware, least-connections, least-requests, "
             "round-robin or random"));
}

std::string_view PolicyName(Policy policy) {
  for (const auto& [p, text] : kNames) {
    if (p == policy) return text;
  }
  return "unknown";
}

std::optional<size_t> Pick(Policy policy, const std::vector<Candidate>& candidates,
                           int64_t prompt_tokens, const PolicyOptions& options, PolicyState& state,
                           Random& random) {
  if (candidates.empty()) return std::nullopt;
  switch (policy) {
    case Policy::kKvTokenAware:
      return KvTokenAware(candidates, prompt_tokens, options, random);
    case Policy::kTokenAware:
      return TokenAware(candidates, prompt_tokens, options, random);
    case Policy::kLeastConnections:
      return ArgMinRandomTie(
          candidates, [](const Candidate& c) { return int64_t{c.open_requests}; }, random);
    case Policy::kLeastRequests:
      return ArgMinRandomTie(
          candidates,
          [](const Candidate& c) {
            return int64_t{c.reported_sequences} + int64_t{c.dispatched_requests};
          },
          random);
    case Policy::kRoundRobin:
      return state.next++ % candidates.size();
    case Policy::kRandom:
      return random.Uniform(candidates.size());
  }
  return std::nullopt;
}

}  // namespace exa::router
