// The rack cache peer (storage role): serves the Weights API from its own directory and fetches
// what it lacks from upstream (the origin) once. Concurrent requests for one chunk share one
// upstream fetch (single flight), so a rack pulls each model from the origin once however many
// nodes start together (docs/architecture.md#weights).
//
// Chunks are stored by content (ROOT/.chunks/AB/SHA256, layout.h), each verified against the
// manifest's sha256 before it is renamed into place, and evicted least-recently-used when the
// cache holds more than its byte budget. Chunks of pinned models (ROOT/NAME/VERSION.pinned,
// `exaserve-cli model pin`) are never evicted; if pins alone exceed the budget the cache stays
// over it and says so in a metric.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "metrics/registry.h"
#include "weights/source.h"
#include "weights/tier.h"

namespace exa::weights {

struct RackCacheOptions {
  std::string root;
  uint64_t budget_bytes = 500ull << 30;
  // One upstream stream of one chunk may take this long; a slower one is retried from where it
  // stopped, up to upstream_attempts times.
  absl::Duration upstream_timeout = absl::Minutes(2);
  int upstream_attempts = 3;
  absl::Duration manifest_timeout = absl::Seconds(10);
};

class RackCache final : public WeightsSource {
 public:
  RackCache(RackCacheOptions options, Tier& upstream, metrics::Registry& registry);
  ~RackCache() override;

  // Indexes chunks already on disk (oldest first in the LRU) and clears interrupted fetches.
  absl::Status Start();

  absl::StatusOr<std::vector<ModelRef>> ListModels() override;
  absl::StatusOr<Manifest> GetManifest(const std::string& name,
                                       const std::string& version) override;
  absl::StatusOr<std::unique_ptr<ChunkReader>> OpenChunk(
      const ChunkKey& key, const std::function<bool()>& cancelled) override;

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t coalesced = 0;
    uint64_t upstream_bytes = 0;
    uint64_t evictions = 0;
    uint64_t cached_bytes = 0;
    uint64_t corrupt_upstream = 0;
    uint64_t corrupt_local = 0;
  };
  Stats stats() const;
  std::string ChunkPath(const std::string& sha256) const;

 private:
  struct Flight {
    absl::Notification done;
    absl::Status status;
  };
  struct Entry {
    uint64_t size_bytes = 0;
    std::list<std::string>::iterator lru;
    // Hashed by this process (fetched and checked, or served whole and checked): chunks found
    // on disk at start are checked the first time they are served.
    bool verified = false;
  };

  absl::Status FetchUpstream(const ChunkKey& key, const ChunkRef& chunk);
  void Insert(const std::string& sha256, uint64_t size_bytes, bool verified)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop(const std::string& sha256) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnServedHash(const std::string& sha256, bool ok);
  void EvictOverBudget() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::set<std::string> PinnedChunks() const;

  const RackCacheOptions options_;
  Tier& upstream_;
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, Entry> index_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // front: most recently used
  std::map<std::string, std::shared_ptr<Flight>> flights_ ABSL_GUARDED_BY(mu_);
  // Parsed manifests by "name:version" (versions are immutable), so a chunk request does not
  // re-read and re-parse the manifest file.
  std::map<std::string, std::shared_ptr<const Manifest>> manifests_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  uint64_t tmp_counter_ ABSL_GUARDED_BY(mu_) = 0;

  metrics::Counter& hits_metric_;
  metrics::Counter& misses_metric_;
  metrics::Counter& coalesced_metric_;
  metrics::Counter& upstream_bytes_metric_;
  metrics::Counter& evictions_metric_;
  metrics::Counter& evicted_bytes_metric_;
  metrics::Counter& corrupt_metric_;
  metrics::Counter& corrupt_local_metric_;
  metrics::Gauge& in_flight_metric_;
  metrics::Gauge& cached_bytes_metric_;
  metrics::Gauge& over_budget_metric_;
};

}  // namespace exa::weights
