// The node cache fetcher: brings one model version into a node's cache directory, chunk by
// chunk, in N parallel streams (default 8, docs/architecture.md#weights's sweet spot), from the
// first tier that works: what the cache already holds, then the rack's storage peer, then the
// origin.
//
// Nothing unverified becomes visible: a file is written under PATH.exa-part, each chunk is
// hashed as it arrives and counts only when its sha256 matches the manifest; when every chunk
// of a file is in, the part file is fsynced and renamed to PATH and a verified marker written.
// A chunk that hashes wrong is discarded, counted, and fetched again from the next tier. A tier
// that fails (down, too slow for tier_timeout) is skipped for tier_backoff, and a chunk that
// broke off mid-stream resumes at the same byte from the next tier. Verified chunks of a file
// still in progress are recorded (PATH.done in the state dir), so an interrupted pull resumes.
// Disk full ends the pull with RESOURCE_EXHAUSTED naming the path, and its part files are
// removed. Every path written is inside the cache directory: manifest paths are validated.
//
// Thread safety: one Pull at a time per Fetcher; progress is reported from fetch threads, one
// call at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "metrics/registry.h"
#include "weights/manifest.h"
#include "weights/tier.h"

namespace exa::weights {

struct FetchOptions {
  std::string cache_dir;
  int parallel = 8;
  // One chunk stream from one tier may take this long before the tier counts as slow.
  absl::Duration tier_timeout = absl::Seconds(60);
  absl::Duration manifest_timeout = absl::Seconds(10);
  // A tier that failed is not asked again for this long (unless no other tier is left).
  absl::Duration tier_backoff = absl::Seconds(5);
  // A busy tier (RESOURCE_EXHAUSTED) is retried after a pause this many times before the next.
  int busy_retries = 20;
  absl::Duration progress_interval = absl::Milliseconds(200);
  // Writes whole 4 KiB-aligned blocks with O_DIRECT (where the file system takes it; tmpfs does
  // not, and then every write is buffered). A buffered write of fresh page-cache pages, and the
  // writeback the fsync before the rename forces, cost the pull more CPU than sha256 did on the
  // 2-core machine this was measured on (README, performance); O_DIRECT sends the bytes to the
  // disk from one reused buffer. The price: the files are not in the page cache afterwards.
  bool direct_io = true;
  // Polled between chunks and between messages of a chunk: true stops the pull with CANCELLED
  // (verified chunks are kept for the next pull).
  std::function<bool()> cancelled;
};

struct PullProgress {
  uint64_t total_bytes = 0;
  uint64_t done_bytes = 0;   // verified, including what was already local
  uint64_t local_bytes = 0;  // verified before this pull
  absl::Duration elapsed;
  bool finished = false;
};

struct PullResult {
  Manifest manifest;
  uint64_t local_bytes = 0;
  std::map<std::string, uint64_t> bytes_by_tier;  // verified chunk bytes per tier name
  uint64_t corrupt_chunks = 0;
  uint64_t tier_failures = 0;
  absl::Duration elapsed;
  // CPU time (user + system) of the fetch threads: receiving, hashing, writing. What the pull
  // cost this node, apart from the peer it pulled from when both share a machine.
  absl::Duration fetch_cpu;
};

// Pull metrics, registered once per registry and shared by every Fetcher of the process.
struct FetchMetrics {
  explicit FetchMetrics(metrics::Registry& registry);
  metrics::Family<metrics::Counter>& bytes;  // by tier
  metrics::Counter& corrupt_chunks;
  metrics::Counter& tier_failures;
  metrics::Histogram& pull_seconds;  // model load time (docs/architecture.md#monitoring-and-alerts:
                                     // alert over 30 s)
};

class Fetcher {
 public:
  // Tiers in order of preference, not owned; `metrics` may be null.
  Fetcher(std::vector<Tier*> tiers, FetchOptions options, FetchMetrics* metrics = nullptr);

  // An empty version means the newest version the first reachable tier knows.
  absl::StatusOr<PullResult> Pull(const std::string& name, const std::string& version,
                                  const std::function<void(const PullProgress&)>& progress = {});

 private:
  absl::StatusOr<Manifest> ResolveManifest(const std::string& name, const std::string& version);

  std::vector<Tier*> tiers_;
  FetchOptions options_;
  FetchMetrics* metrics_;
};

}  // namespace exa::weights
