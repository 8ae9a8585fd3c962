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
// Keys are a hash's first 8 bytes (what the reports carry). A replica reports every k-th block of
// a chain only (the delta's report_every_blocks): the index finds a request's cached prefix to
// within k blocks by looking at blocks k-1, 2k-1, ... of the request's chain.
//
// Bounded: at most `max_hashes_per_replica` hashes per replica. Stored hashes past the bound are
// not indexed (under-reporting again, never over-reporting), and the index counts them.
//
// Thread safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
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
  // replica holds, to within its report_every_blocks (0 for a replica unknown or stale).
  int32_t MatchedBlocks(const std::string& replica, std::span<const Hash128> hashes) const
      ABSL_LOCKS_EXCLUDED(mu_);

  struct ReplicaState {
    uint64_t epoch = 0;
    uint64_t cursor = 0;
    bool stale = true;
    int32_t report_every_blocks = 1;
    size_t hashes = 0;
    uint64_t dropped = 0;         // stored hashes not indexed (the bound)
    std::string cache_namespace;  // the chains' namespace, from the last snapshot
  };
  ReplicaState State(const std::string& replica) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `replica`'s set is exactly `hashes` (tests).
  bool Holds(const std::string& replica, std::span<const Hash128> hashes) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    uint64_t epoch = 0;
    uint64_t cursor = 0;
    bool stale = true;
    int32_t report_every_blocks = 1;
    uint64_t dropped = 0;
    std::string cache_namespace;
    absl::flat_hash_set<uint64_t> hashes;
  };
  void Store(Entry& e, uint64_t key);

  const size_t max_hashes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> replicas_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exa::router
