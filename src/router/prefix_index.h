// A gateway's index of what each replica holds in its prefix cache
// (docs/architecture.md#prefix-cache), fed by the cached-block deltas on the nodes' load streams:
// for a request's chained block hashes, how many leading blocks a replica can serve from cache.
//
// Continuity: a delta applies only where it follows what the index has (same epoch, `from` equal
// to the index's cursor); a snapshot replaces the replica's set. A delta that does not follow
// (the node restarted the replica, or a message was lost) drops the replica's set and marks it
// stale until the next snapshot: the index never routes on hashes it may have missed evictions
// for, at the cost of a hit it does not know of.
//
// Keys are a hash's first 8 bytes (what the reports carry). A replica reports some blocks of a
// chain only (the delta's ReportSchedule): the index finds a request's cached prefix, to within
// the schedule's stride at that depth, by looking at the same positions of the request's chain.
//
// Inverted as well: each key lists the replicas holding it, so Matches() finds the replicas that
// hold part of a request's prompt by walking the request's reported positions through those
// lists — work in the holders, not in every replica (docs/architecture.md#routing).
//
// Bounded: at most `max_hashes_per_replica` hashes per replica (the holder lists are bounded by
// the same count in total). Stored hashes past the bound are not indexed (under-reporting again,
// never over-reporting), and the index counts them.
//
// Thread safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "common/hash128.h"
#include "common/prefix_delta.h"

namespace exa::router {

class PrefixIndex {
 public:
  // 2^18 hashes: a replica with 4 M tokens of KV in 16-token blocks; ~8 MiB of index per replica
  // at most (a flat hash set of 16-byte keys).
  static constexpr size_t kDefaultMaxHashesPerReplica = size_t{1} << 18;

  explicit PrefixIndex(size_t max_hashes_per_replica = kDefaultMaxHashesPerReplica)
      : max_hashes_(max_hashes_per_replica) {}

  enum class Applied {
    kApplied,
    kStale,  // did not follow: the replica's set was dropped until a snapshot arrives
  };
  Applied Apply(const std::string& replica, const PrefixCacheDelta& delta) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(const std::string& replica) ABSL_LOCKS_EXCLUDED(mu_);

  // How many leading blocks of a request's chain `hashes` (every block's hash, in order) the
  // replica holds, to within its report schedule's stride (0 for a replica unknown or stale).
  int32_t MatchedBlocks(const std::string& replica, std::span<const Hash128> hashes) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Every replica holding at least the first reported block of the request's chain, with the
  // leading blocks it holds (as MatchedBlocks). `chain_for(cache_namespace, n)` hashes at least
  // the first n blocks of the request's chain from that namespace's root (fewer: the chain ends
  // there; empty: skip the namespace). It is called without the index's lock, in rounds: the
  // index walks what is hashed, and only while some replica still matches where the hashed part
  // ends does it ask for twice as much and walk again. So a prompt is hashed about as deep as
  // some cache reaches, and long hashing never holds the lock. Cost under the lock: one lookup
  // per reported position while any replica still matches, plus the holders, per round.
  using ChainFn = std::function<std::span<const Hash128>(const std::string&, size_t blocks)>;
  struct Match {
    std::string replica;
    int32_t blocks = 0;
  };
  std::vector<Match> Matches(const ChainFn& chain_for) const ABSL_LOCKS_EXCLUDED(mu_);

  struct ReplicaState {
    uint64_t epoch = 0;
    uint64_t cursor = 0;
    bool stale = true;
    ReportSchedule report;
    size_t hashes = 0;
    uint64_t dropped = 0;         // stored hashes not indexed (the bound)
    std::string cache_namespace;  // the chains' namespace, from the last snapshot
  };
  ReplicaState State(const std::string& replica) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `replica`'s set is exactly `hashes` (tests).
  bool Holds(const std::string& replica, std::span<const Hash128> hashes) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Slot = uint32_t;  // a replica's dense number, reused after Remove
  struct Entry {
    Slot slot = 0;
    uint32_t group = 0;  // the (namespace, schedule) its chains follow: groups_
    uint64_t epoch = 0;
    uint64_t cursor = 0;
    bool stale = true;
    ReportSchedule report;
    uint64_t dropped = 0;
    std::string cache_namespace;
    absl::flat_hash_set<uint64_t> hashes;
  };
  struct Group {
    std::string cache_namespace;
    ReportSchedule report;
    size_t replicas = 0;
  };

  Entry& EntryFor(const std::string& replica) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Store(Entry& e, uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Erase(Entry& e, uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropHolder(Slot slot, uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Clear(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetGroup(Entry& e, const std::string& cache_namespace, ReportSchedule report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WalkGroup(uint32_t group, const ChainFn& chain_for,
                 absl::FunctionRef<void(const std::string&, int32_t)> found) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_hashes_;
  mutable absl::Mutex mu_;
  // Pointer-stable: slot_ids_ points at the keys.
  absl::node_hash_map<std::string, Entry> replicas_ ABSL_GUARDED_BY(mu_);
  std::vector<const std::string*> slot_ids_ ABSL_GUARDED_BY(mu_);  // by slot; null: free
  std::vector<Slot> free_slots_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> slot_group_ ABSL_GUARDED_BY(mu_);  // by slot
  std::vector<Group> groups_ ABSL_GUARDED_BY(mu_);         // group 0: no snapshot yet
  absl::flat_hash_map<uint64_t, absl::InlinedVector<Slot, 2>> holders_ ABSL_GUARDED_BY(mu_);
  // Matches' scratch, by slot: the last position a replica matched, and in which walk.
  mutable std::vector<int64_t> walk_pos_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<uint64_t> walk_mark_ ABSL_GUARDED_BY(mu_);
  mutable uint64_t walk_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace exa::router
