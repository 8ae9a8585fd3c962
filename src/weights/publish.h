// Computing a manifest from a model directory and publishing a version into an origin directory
// (`exaserve-cli model publish`).
#pragma once

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"
#include "weights/manifest.h"

namespace exa::weights {

struct ComputeOptions {
  uint64_t chunk_bytes = kDefaultChunkBytes;
  int threads = 0;  // files hashed at once; 0: one per hardware thread
};

// Hashes every regular file under `dir` (path components starting with '.' are skipped: VCS and
// tool state, not weights), files in parallel, each in one sequential pass.
absl::StatusOr<Manifest> ComputeManifest(const std::filesystem::path& dir, std::string_view name,
                                         std::string_view version, const ComputeOptions& options);

// Copies `dir` to ORIGIN/NAME/VERSION (unless it already is that directory), computes the
// manifest there and writes it last, so a version is listed only once complete. A version is
// immutable: publishing different content under an existing version is ALREADY_EXISTS.
absl::StatusOr<Manifest> PublishModel(const std::filesystem::path& dir,
                                      const std::filesystem::path& origin, std::string_view name,
                                      std::string_view version, const ComputeOptions& options);

}  // namespace exa::weights
