// Routing policies (docs/architecture.md#routing): pure functions from a view of candidate replicas
// to a choice. No clock, no I/O, no locks (TigerBeetle's pure leaves); randomness is passed in.
//
//   kv-token-aware (default): token-aware's queue, made cache- and slot-aware. A replica's cost =
//     its queue (as token-aware) + this request's uncached prefill (the prompt minus the prefix
//     the replica holds, from the gateway's prefix index). Replicas are tiered: a free batch slot
//     (reported sequences + dispatched since < slots) and nothing blocked, then nothing blocked,
//     then the rest; the best non-empty tier competes. Within it, power of two choices: two
//     distinct random members, the cheaper (then the one with more free slots), so gateways
//     sharing a stale report do not herd onto its cheapest replica. The holders of (nearly) the
//     longest cached prefix, two of them at most (AffinityHolders), then challenge that pick and
//     the cheapest wins. Bounded load for affinity: a replica whose queue is over
//     `affinity_load_bound` x the tier's mean (plus the prompt) gets no credit for its cache, so
//     a hot prefix never piles onto one replica.
//   token-aware: cost = reported pending tokens + what this gateway dispatched since
//     that report (each request's prompt plus the pool's reported pending tokens per sequence,
//     the expected decode) + this request's prompt tokens. Replicas that reported requests
//     waiting (no batch slot or KV free) are skipped while any other is eligible: tokens measure
//     work, not slots. The cheapest wins, with power-of-two choices among candidates within
//     `near_equal_fraction` of the best or within this request's prompt tokens (the draw with
//     fewer sequences, i.e. more free slots, then the cheaper), so many gateways acting on the
//     same reports do not herd onto one, and a long prompt favours a replica that prefills fast.
//   least-connections: fewest requests this gateway has open to the replica.
//   least-requests: fewest sequences the replica reports running + waiting, plus dispatched.
//   round-robin, random: the baselines.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/random.h"

namespace exa::router {

enum class Policy {
  kKvTokenAware,
  kTokenAware,
  kLeastConnections,
  kLeastRequests,
  kRoundRobin,
  kRandom
};

absl::StatusOr<Policy> ParsePolicy(std::string_view name);
std::string_view PolicyName(Policy policy);

// What the router knows of one eligible replica (filters — model, version, health, draining —
// are applied before; see ReplicaTable).
struct Candidate {
  int64_t reported_pending_tokens = 0;  // from the replica's last load report
  int64_t dispatched_tokens = 0;        // this gateway's dispatches since that report
  int32_t reported_sequences = 0;       // running + waiting at the last report
  int32_t dispatched_requests = 0;      // this gateway's dispatches since that report
  int32_t open_requests = 0;            // this gateway's requests still streaming from it
  int32_t reported_waiting = 0;         // admitted but not running at the last report
  int32_t slots = 0;                    // the replica's batch slots (max running); 0: unknown
  int64_t cached_tokens = 0;            // of this request's prompt, the prefix the replica holds
};

struct PolicyOptions {
  // Candidates whose cost is within this fraction of the cheapest count as equal.
  double near_equal_fraction = 0.1;
  // ...or within this many tokens, which matters when every replica is nearly idle.
  int64_t near_equal_tokens = 64;
  // kv-token-aware: a replica whose queue exceeds this multiple of the mean (plus the prompt)
  // gets no credit for the prefix it holds.
  double affinity_load_bound = 1.5;
};

// Per-gateway state a policy may keep between picks (the round-robin cursor).
struct PolicyState {
  uint64_t next = 0;
};

// kv-token-aware in parts, for a caller that keeps the tiers and their sums itself
// (ReplicaTable does, so a decision need not visit every replica); Pick composes the same parts.
//
// The candidate's tier: 0 a batch slot free and nothing blocked, 1 nothing blocked, 2 the rest.
int KvTier(const Candidate& c);
// The work queued ahead of a new request: reported pending tokens, this gateway's dispatches
// since, and `per_request` expected decode tokens for each of those dispatches.
int64_t KvQueue(const Candidate& c, int64_t per_request);
struct KvTierStats {
  int64_t per_request = 0;  // the pool's reported pending tokens per sequence
  double mean_queue = 0;    // KvQueue's mean over the best tier's members
};
// Of `sampled` — the power-of-two draws first (`draws`: 1 or 2, members of the best tier), then
// members of the same tier holding part of the prompt — the index of the one to use.
size_t KvPick(std::span<const Candidate> sampled, size_t draws, int64_t prompt_tokens,
              const KvTierStats& stats, const PolicyOptions& options);

// Two distinct indices below `n` drawn at random, the first uniformly, the second uniformly among
// the rest (one index when `n` is 1, none when 0): kv-token-aware's draws.
std::vector<size_t> TwoDistinct(size_t n, Random& random);

// Of the replicas holding part of a prompt (`cached`: the prompt tokens each holds), the indices
// of those that challenge kv-token-aware's random draws: the holders of nearly the longest prefix
// any holds (at least three quarters of it), and of those, when more than two, two drawn at
// random. A prefix that many replicas hold (a system prompt every request starts with) then
// adds two random candidates, not its least-loaded holder: that one would be every gateway's
// pick at once, and a burst of arrivals would pile onto it before a report says so.
std::vector<size_t> AffinityHolders(std::span<const int64_t> cached, Random& random);

// Index into `candidates` of the replica to use, or nullopt when there is none.
std::optional<size_t> Pick(Policy policy, const std::vector<Candidate>& candidates,
                           int64_t prompt_tokens, const PolicyOptions& options, PolicyState& state,
                           Random& random);

}  // namespace exa::router
