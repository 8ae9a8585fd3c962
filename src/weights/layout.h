// Where a model version lives in a weights directory (an origin, a node cache, a rack cache):
//
//   ROOT/NAME/VERSION/...               the model's files, Hugging Face layout (node, origin)
//   ROOT/NAME/VERSION.manifest.json     its manifest (canonical JSON)
//   ROOT/NAME/VERSION.state/PATH.done   chunks of PATH already verified (resume after restart)
//   ROOT/NAME/VERSION.state/PATH.ok     verified marker: size, mtime and sha256 of PATH
//   ROOT/NAME/VERSION.pinned            present: never evicted
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
