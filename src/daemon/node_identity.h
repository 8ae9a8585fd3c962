// A node's stable identity: a UUID generated once and kept in the data dir, so a node that
// restarts (even on a new address) is the same node with a new incarnation.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace exa::daemon {

// "" when `id` can name a node (1-64 of [A-Za-z0-9._-]: it lands in paths, metric labels and
// logs); else why not, naming the value.
std::string NodeIdError(const std::string& id);

// Creates `data_dir` if needed and checks it is writable (a clear error names the path), then
// returns the id in data_dir/node_id, creating it (atomically) on first start. A non-empty
// `configured_id` wins and is stored.
absl::StatusOr<std::string> LoadOrCreateNodeId(const std::string& data_dir,
                                               const std::string& configured_id);

// The gossip incarnation to start with: above every earlier run's, so peers see a restart and
// not stale news. Kept in data_dir/incarnation; seeded from the clock so a lost file still
// yields a higher number.
absl::StatusOr<uint32_t> NextIncarnation(const std::string& data_dir);

// An exclusive lock on DATA_DIR/lock, held while the object lives (and released by the kernel
// when the process dies). Two daemons on one data dir would share one node id: the second
// would take over the first's membership entry and, leaving, mark the live node as left.
class DataDirLock {
 public:
  // FAILED_PRECONDITION naming the dir and the holder's pid when another process holds it.
  static absl::StatusOr<DataDirLock> Acquire(const std::string& data_dir);
  DataDirLock(DataDirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DataDirLock& operator=(DataDirLock&&) = delete;
  DataDirLock(const DataDirLock&) = delete;
  ~DataDirLock();

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}
  int fd_;
};

// A random RFC 4122 version-4 UUID from the OS entropy source.
std::string NewUuid();

// Writes `contents` to `path` through a temporary file, fsync and rename, so a crash leaves the
// old or the new file, never half of one.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace exa::daemon
