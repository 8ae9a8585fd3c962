// A node's model cache (`--cache-dir`, node-local NVMe) in the layout.h layout: what is there,
// whether it is intact, and the operator's verbs on it (`exaserve-cli model ls|verify|rm|pin`).
//
// A file is usable when it exists under its final name (only verified chunks are ever renamed
// into place, see fetcher.h) and its verified marker matches its size and mtime: then a start
// does not re-hash it. `VerifyModel` re-hashes on demand and names every bad chunk.
//
// Thread safety: free functions over the file system; the caller serializes writers of one
// model version (a pull and an rm of the same version at once are not supported).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weights/layout.h"
#include "weights/manifest.h"

namespace exa::weights {

// Writes PATH's verified marker (its size, mtime and the manifest's sha256).
absl::Status WriteVerifiedMarker(const fs::path& root, const Manifest& m, const FileEntry& file);
// True when PATH exists with the size and mtime its marker recorded.
bool HasVerifiedMarker(const fs::path& root, const Manifest& m, const FileEntry& file);

struct CachedModel {
  std::string name;
  std::string version;
  std::string digest;
  uint64_t total_bytes = 0;
  uint64_t verified_bytes = 0;  // files present with a matching verified marker
  bool complete = false;
  bool pinned = false;
};
std::vector<CachedModel> ListCachedModels(const fs::path& root);

struct BadChunk {
  std::string path;
  int64_t chunk_index = -1;  // -1: the whole file (missing, wrong size)
  std::string reason;
};
struct VerifyReport {
  uint64_t files = 0;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  std::vector<BadChunk> bad;
};
// Re-hashes every file of the version (files in parallel, `threads` at once), refreshes the
// markers of good files and removes the markers of bad ones.
absl::StatusOr<VerifyReport> VerifyModel(const fs::path& root, const std::string& name,
                                         const std::string& version, int threads);

// Removes the version's files, state, pin and manifest.
absl::Status RemoveModel(const fs::path& root, const std::string& name, const std::string& version);
absl::Status SetPinned(const fs::path& root, const std::string& name, const std::string& version,
                       bool pinned);

// The version's directory when every file is present and verified (markers, no re-hash):
// what the engine maps. FAILED_PRECONDITION names the first file that is not.
absl::StatusOr<fs::path> VerifiedModelDir(const fs::path& root, const std::string& name,
                                          const std::string& version);

}  // namespace exa::weights
