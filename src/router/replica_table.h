// The gateway's view of every replica it may route to: identity and labels, the last load
// report, what this gateway has dispatched since, and health. Choose() filters by model,
// version, readiness and health, then asks the policy (router/policy.h).
//
// Scale (docs/architecture.md#routing): replicas are pooled by model, and each pool keeps its
// routable replicas (ready, healthy, not ejected) in kv-token-aware's tiers with the sums the
// policy needs, updated as reports, dispatches and health change. So the default policy's
// decision touches two random members of the best tier and the replicas the prefix index
// names as holding part of the prompt, not every replica; a request pinned to a version, to
// labels or away from replicas already tried takes the full pass over its model's pool, as do
// the other policies.
//
// Thread safety: every method may be called from any thread (one mutex).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/hash128.h"
#include "common/random.h"
#include "router/policy.h"
#include "router/prefix_index.h"

namespace exa::router {

struct ReplicaInfo {
  std::string id;       // unique, e.g. "node-3/exa-tiny-arith@v1#0"
  std::string model;    // e.g. "exa-tiny-arith"
  std::string version;  // e.g. "v1"
  std::map<std::string, std::string> labels;
};

struct LoadReport {
  int64_t pending_tokens = 0;
  int32_t sequences = 0;  // running + waiting
  bool ready = false;     // false while loading, warming or draining
  // Of `sequences`, those admitted but not running (no batch slot or KV free): a replica with a
  // queue is saturated. 0 when the reporter does not say.
  int32_t waiting = 0;
  double ttft_p99_ms = 0;  // recent latency; 0: not measured yet
  double itl_p99_ms = 0;
  int32_t slots = 0;  // batch slots (max running sequences); 0 when the reporter does not say
  // The highest of this table's dispatches (Choice::dispatch) the replica had admitted when it
  // measured the above: later ones still count on top of the report. Unset: the reporter does
  // not say, and the report is taken to count every dispatch before it
  // (docs/architecture.md#load-on-change).
  std::optional<uint64_t> admitted_dispatch;
};

struct RouteRequest {
  std::string model;
  std::string version;  // empty: any version
  int64_t prompt_tokens = 0;
  // Replicas already tried for this request (a retry after a failure before the first token).
  std::vector<std::string> exclude;
  // Only replicas carrying every one of these labels (version routing). The key "version"
  // falls back to the replica's model version when it has no such label.
  std::map<std::string, std::string> labels;
  // The prompt's chained block hashes from a cache namespace's root
  // (docs/architecture.md#prefix-cache), full blocks of `block_tokens`, for the kv-token-aware
  // policy; unset: no prefix affinity. block_hashes(ns, n) gives at least the first n (fewer
  // only when the prompt has fewer full blocks), so the caller may hash lazily: Choose asks only
  // as deep as some replica's cache reaches, without the table's lock held. A span must stay
  // valid until the next call for the same namespace, and until Choose returns.
  std::function<std::span<const Hash128>(const std::string& cache_namespace, size_t blocks)>
      block_hashes;
  int32_t block_tokens = 16;
};

// The replica's value for label `key` ("version" defaults to info.version); "" when absent.
std::string LabelValue(const ReplicaInfo& info, const std::string& key);

struct ReplicaSnapshot {
  ReplicaInfo info;
  LoadReport report;
  bool healthy = true;
  bool ejected = false;  // performance level: an outlier among its model's replicas
  int32_t open_requests = 0;
  int64_t dispatched_tokens = 0;
};

// Whether a replica still deserves the streams it serves (docs/architecture.md#failover).
struct ReplicaStanding {
  bool known = false;      // false: removed (its node died or left)
  bool healthy = true;     // false: its node is suspected
  bool ejected = false;    // a performance outlier
  double itl_p99_ms = 0;   // its last reported inter-token P99; 0: not measured
  double ttft_p99_ms = 0;  // and time-to-first-token P99
};

class ReplicaTable {
 public:
  ReplicaTable(Policy policy, uint64_t seed, PolicyOptions options = {})
      : policy_(policy), options_(options), random_(seed) {}

  void Upsert(const ReplicaInfo& info);
  void Remove(const std::string& id);
  // A new load report replaces the old one and clears the dispatches it counts: those up to
  // its admitted_dispatch, or all when it does not say.
  void Report(const std::string& id, const LoadReport& report);
  void SetHealthy(const std::string& id, bool healthy);
  // Ejection (the performance level of health) outlives the replica's entry: one that leaves
  // the table while ejected (its node's load stream restarted) comes back ejected, until it is
  // readmitted. At most kMaxEjectedIds ids are remembered.
  void SetEjected(const std::string& id, bool ejected);
  static constexpr size_t kMaxEjectedIds = 4096;
  // The index Choose asks how much of a request's prefix each replica holds (not owned; it
  // must outlive the table). Without one, no replica is credited for a cached prefix.
  void SetPrefixIndex(const PrefixIndex* index) ABSL_LOCKS_EXCLUDED(mu_);

  // The replica for `request`, its dispatch recorded (pair with Complete). NOT_FOUND names the
  // model or version and lists what exists; UNAVAILABLE when none is ready and healthy.
  absl::StatusOr<std::string> Choose(const RouteRequest& request);
  // Choose, with what the table saw of the chosen replica.
  struct Choice {
    std::string replica;
    int64_t cached_tokens = 0;  // of the prompt, what the prefix index said the replica holds
    // The work ahead of the request's first token there: the replica's queue (KvQueue) before
    // this dispatch plus the prompt's uncached part (router/wait_model.h turns it into seconds).
    int64_t tokens_ahead = 0;
    // This table's number for the dispatch, rising from 1: a node echoes the highest it admitted
    // (LoadReport::admitted_dispatch).
    uint64_t dispatch = 0;
  };
  absl::StatusOr<Choice> ChooseFor(const RouteRequest& request);
  // The request sent by Choose finished (any outcome); `dispatch` is its Choice::dispatch, no
  // longer counted if no report has counted it yet (it never reached the replica, or finished
  // first). 0: only the open count goes down.
  void Complete(const std::string& id, uint64_t dispatch);

  std::vector<ReplicaSnapshot> List() const;
  ReplicaStanding StandingOf(const std::string& id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Empty when every pool's tiers and sums agree with its entries, else what disagrees (tests).
  std::string CheckInvariants() const ABSL_LOCKS_EXCLUDED(mu_);

  // What Choose decided since the table was made (for /metrics).
  struct Decisions {
    uint64_t total = 0;
    uint64_t with_cache = 0;  // the chosen replica held part of the prompt
    uint64_t prompt_tokens = 0;
    uint64_t cached_tokens = 0;  // of those, what the chosen replicas held (by the index)
  };
  Decisions decisions() const ABSL_LOCKS_EXCLUDED(mu_);
  // Models with at least one replica, sorted.
  std::vector<std::string> Models() const;
  // Whether some replica of `model` is ready, healthy and not ejected (a request could go to it).
  bool HasRoutable(std::string_view model) const ABSL_LOCKS_EXCLUDED(mu_);
  Policy policy() const { return policy_; }

 private:
  // A dispatch no report has counted yet.
  struct Dispatch {
    uint64_t number = 0;
    int64_t tokens = 0;  // the uncached prompt it adds
  };
  struct Entry {
    ReplicaSnapshot snap;
    // Oldest first; dispatched_requests and snap.dispatched_tokens are its size and sum. Bounded
    // by the requests open on the replica: Complete takes its own out.
    std::deque<Dispatch> unreported;
    int32_t dispatched_requests = 0;
    // Set by the prefix index's answer for decision number `match_decision` only.
    uint64_t match_decision = 0;
    int32_t match_blocks = 0;
    // Its place among the pool's routable replicas: tier (KvTier), -1 when not routable, and
    // index in that tier's list.
    int tier = -1;
    size_t tier_pos = 0;
  };
  // What a tier's members add up to (for kv-token-aware's mean queue).
  // What a set of routable replicas adds up to (kv-token-aware's mean queue and the pool's
  // decode estimate).
  struct TierSums {
    int64_t pending = 0;    // reported pending tokens, each clamped at 0
    int64_t sequences = 0;  // reported running + waiting, each clamped at 0
    int64_t dispatched_tokens = 0;
    int64_t dispatched_requests = 0;
    bool operator==(const TierSums&) const = default;
  };
  struct Pool {
    std::vector<Entry*> all;
    std::array<std::vector<Entry*>, 3> tiers;
    std::array<TierSums, 3> sums;  // by tier
    TierSums routable;             // every routable replica of the pool
  };

  // Ready, healthy and not ejected: in the pool's tiers.
  static bool Routable(const Entry& e);
  // Adds (sign 1) or takes away (sign -1) what `e` contributes to `sums`.
  static void Account(const Entry& e, int64_t sign, TierSums& sums);

  static bool Eligible(const Entry& e, const RouteRequest& request);
  static Candidate CandidateOf(const Entry& e, int64_t cached_tokens);
  void AddToPool(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveFromPool(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unlink before changing what an entry's tier or sums depend on, Link after.
  void Link(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unlink(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The replicas the prefix index names as holding part of the prompt (kv-token-aware only),
  // hashing the prompt as deep as needed: without the table's lock.
  std::vector<PrefixIndex::Match> FindHolders(const RouteRequest& request) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Of `found`, the entries of `model`, marked for decision `decision`, with their blocks.
  std::vector<std::pair<Entry*, int32_t>> MarkHolders(const std::vector<PrefixIndex::Match>& found,
                                                      const std::string& model, uint64_t decision)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kv-token-aware over the pool's tiers; nullptr when no replica is routable.
  Entry* ChooseFromTiers(Pool& pool, const RouteRequest& request, uint64_t decision,
                         const std::vector<std::pair<Entry*, int32_t>>& holders,
                         int64_t* cached_tokens) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Any policy over the eligible replicas of the pool; nullptr when none is eligible.
  Entry* ChooseByPass(Pool& pool, const RouteRequest& request, uint64_t decision,
                      int64_t* cached_tokens) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NoReplica(const RouteRequest& request) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Policy policy_;
  const PolicyOptions options_;
  mutable absl::Mutex mu_;
  Random random_ ABSL_GUARDED_BY(mu_);
  const PrefixIndex* prefix_index_ ABSL_GUARDED_BY(mu_) = nullptr;
  PolicyState state_ ABSL_GUARDED_BY(mu_);
  Decisions decisions_ ABSL_GUARDED_BY(mu_);
  uint64_t marked_decisions_ ABSL_GUARDED_BY(mu_) = 0;                 // Entry::match_decision
  uint64_t dispatches_ ABSL_GUARDED_BY(mu_) = 0;                       // Choice::dispatch
  std::map<std::string, Entry> replicas_ ABSL_GUARDED_BY(mu_);         // pointer-stable
  absl::flat_hash_map<std::string, Pool> pools_ ABSL_GUARDED_BY(mu_);  // by model
  absl::flat_hash_set<std::string> ejected_ ABSL_GUARDED_BY(mu_);      // SetEjected
};

}  // namespace exa::router
