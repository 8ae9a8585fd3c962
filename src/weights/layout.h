// Where a model version lives in a weights directory (an origin, a node cache, a rack cache):
//
//   ROOT/NAME/VERSION/...               the model's files, Hugging Face layout (node, origin)
//   ROOT/NAME/VERSION.manifest.json     its manifest (canonical JSON)
//   ROOT/NAME/VERSION.state/PATH.done   chunks of PATH already verified (resume after restart)
//   ROOT/NAME/VERSION.state/PATH.ok     verified marker: size, mtime and sha256 of PATH
//   ROOT/NAME/VERSION.pinned            present: never evicted
//   ROOT/NAME/VERSION.lock              flock of the one pull or removal of the version at a time
//   ROOT/.chunks/AB/SHA256              rack cache: chunks by content
//
// Manifests and markers beside (not inside) the model directory, so no file a model ships can
// collide with them. Writers here are atomic: temp name, fsync, rename, fsync of the directory.
//
// Thread safety: free functions; concurrent writers of one path are the caller's concern.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "weights/manifest.h"

namespace exa::weights {

namespace fs = std::filesystem;

fs::path ModelDir(const fs::path& root, std::string_view name, std::string_view version);
fs::path ManifestPath(const fs::path& root, std::string_view name, std::string_view version);
fs::path StateDir(const fs::path& root, std::string_view name, std::string_view version);
fs::path PinPath(const fs::path& root, std::string_view name, std::string_view version);
fs::path LockPath(const fs::path& root, std::string_view name, std::string_view version);

// An exclusive flock on LockPath: one writer of a version in a cache at a time, across threads
// (two replicas of one model starting together) and processes (exaserve-cli beside the
// daemon) — a pull, or a removal, which must not delete files a pull is writing. Unlocked when
// destroyed. Open locks survive the file's removal, so Acquire checks, once locked, that the
// path still names the file it locked, and locks the new one otherwise.
class VersionLock {
 public:
  // Waits for the lock when `wait`, else fails at once with FAILED_PRECONDITION while another
  // holds it.
  static absl::StatusOr<VersionLock> Acquire(const fs::path& root, std::string_view name,
                                             std::string_view version, bool wait);
  VersionLock(VersionLock&& o) noexcept;
  VersionLock& operator=(VersionLock&&) = delete;
  ~VersionLock();
  // Removes the lock file, still held (a removal takes everything of the version away).
  void RemoveFile();

 private:
  VersionLock(int fd, fs::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  fs::path path_;
};

struct ModelId {
  std::string name;
  std::string version;
  auto operator<=>(const ModelId&) const = default;
};

// Every (name, version) with a manifest under `root`, sorted.
std::vector<ModelId> ListModelIds(const fs::path& root);

// Reads and validates ROOT/NAME/VERSION.manifest.json; NOT_FOUND when it is absent.
absl::StatusOr<Manifest> LoadManifest(const fs::path& root, std::string_view name,
                                      std::string_view version);
absl::Status SaveManifest(const fs::path& root, const Manifest& manifest);

// Resolves an empty version to the newest one under root ("v10" after "v9": digit runs compare
// as numbers); NOT_FOUND names the model when none exists.
absl::StatusOr<std::string> NewestVersion(const std::vector<ModelId>& ids, std::string_view name);
bool VersionLess(std::string_view a, std::string_view b);

// Writes `content` to `path` atomically and durably, creating parent directories.
absl::Status WriteFileAtomically(const fs::path& path, std::string_view content);
absl::StatusOr<std::string> ReadSmallFile(const fs::path& path, uint64_t max_bytes);
absl::Status FsyncDirectory(const fs::path& dir);
// Writes `pieces` back to back at `offset` of `fd` (pwritev, retried on short writes and EINTR);
// an error names `path`.
absl::Status WritePiecesAt(int fd, const fs::path& path, uint64_t offset,
                           absl::Span<const std::string_view> pieces);

// An errno as a Status whose code says what the caller should do (ENOSPC: RESOURCE_EXHAUSTED).
absl::Status ErrnoStatus(int err, std::string_view what, const fs::path& path);

// One sequential pass over a file: its sha256 and one per chunk.
struct FileDigest {
  uint64_t size_bytes = 0;
  std::string sha256;
  std::vector<std::string> chunk_sha256;
};
absl::StatusOr<FileDigest> HashFile(const fs::path& path, uint64_t chunk_bytes);

}  // namespace exa::weights
