// The gateway's view of every replica it may route to: identity and labels, the last load
// report, what this gateway has dispatched since, and health. Choose() filters by model,
// version, readiness and health, then asks the policy (router/policy.h).
//
// Thread safety: every method may be called from any thread (one mutex). Choose visits the
// model's replicas in one flat pass (a pool per model) and asks the prefix index once for the
// replicas holding part of the prompt (docs/architecture.md#routing).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
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
  // (docs/architecture.md#prefix-cache), every full block of `block_tokens`, for the
  // kv-token-aware policy; unset: no prefix affinity. Choose calls it once per namespace its
  // candidates' caches use; the span must stay valid until Choose returns.
  std::function<std::span<const Hash128>(const std::string& cache_namespace)> block_hashes;
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

class ReplicaTable {
 public:
  ReplicaTable(Policy policy, uint64_t seed, PolicyOptions options = {})
      : policy_(policy), options_(options), random_(seed) {}

  void Upsert(const ReplicaInfo& info);
  void Remove(const std::string& id);
  // A new load report replaces the old one and clears what was dispatched before it.
  void Report(const std::string& id, const LoadReport& report);
  void SetHealthy(const std::string& id, bool healthy);
  void SetEjected(const std::string& id, bool ejected);
  // The index Choose asks how much of a request's prefix each replica holds (not owned; it
  // must outlive the table). Without one, no replica is credited for a cached prefix.
  void SetPrefixIndex(const PrefixIndex* index) ABSL_LOCKS_EXCLUDED(mu_);

  // The replica for `request`, its dispatch recorded (pair with Complete). NOT_FOUND names the
  // model or version and lists what exists; UNAVAILABLE when none is ready and healthy.
  absl::StatusOr<std::string> Choose(const RouteRequest& request);
  // The request sent by Choose finished (any outcome).
  void Complete(const std::string& id);

  std::vector<ReplicaSnapshot> List() const;

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
  Policy policy() const { return policy_; }

 private:
  struct Entry {
    ReplicaSnapshot snap;
    int32_t dispatched_requests = 0;
    // Set by the prefix index's answer for decision number `match_decision` only.
    uint64_t match_decision = 0;
    int32_t match_blocks = 0;
  };

  static bool Eligible(const Entry& e, const RouteRequest& request);
  void AddToPool(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveFromPool(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the entries holding part of the prompt for decision `decision`.
  void MarkHolders(const RouteRequest& request, uint64_t decision)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NoReplica(const RouteRequest& request) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<Candidate> Candidates(const std::vector<Entry*>& eligible,
                                    const RouteRequest& request, uint64_t decision) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Policy policy_;
  const PolicyOptions options_;
  mutable absl::Mutex mu_;
  Random random_ ABSL_GUARDED_BY(mu_);
  const PrefixIndex* prefix_index_ ABSL_GUARDED_BY(mu_) = nullptr;
  PolicyState state_ ABSL_GUARDED_BY(mu_);
  Decisions decisions_ ABSL_GUARDED_BY(mu_);
  uint64_t marked_decisions_ ABSL_GUARDED_BY(mu_) = 0;          // Entry::match_decision
  std::map<std::string, Entry> replicas_ ABSL_GUARDED_BY(mu_);  // pointer-stable
  // By model: its replicas' entries, the order immaterial.
  absl::flat_hash_map<std::string, std::vector<Entry*>> pools_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exa::router
