// A model version's manifest: every file of the model directory (Hugging Face layout) with its
// size and sha256, split into fixed-size chunks each with its own sha256. The sha256 of the
// manifest's canonical JSON (its digest) names the version's content.
//
// Manifests come from the network and from disk, so ParseManifestJson and ValidateManifest are
// strict: paths must stay inside the model directory, names must be unique, and sizes and chunk
// counts must be consistent and below fixed bounds. Every error names the field and value.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace exa::weights {

// 64 MiB: big enough that per-chunk overhead (one stream set-up, one fsync) is noise, small
// enough that a retry after a corrupt chunk costs well under a second (docs/architecture.md#flows).
inline constexpr uint64_t kDefaultChunkBytes = 64ull << 20;
// Bounds a manifest must respect; beyond them it is refused as absurd, not allocated for.
inline constexpr uint64_t kMinChunkBytes = 4ull << 10;
inline constexpr uint64_t kMaxChunkBytes = 1ull << 30;
inline constexpr uint64_t kMaxFileBytes = 4ull << 40;    // 4 TiB: far beyond any shard
inline constexpr uint64_t kMaxModelBytes = 64ull << 40;  // 64 TiB: far beyond any model
inline constexpr size_t kMaxFiles = 100000;
inline constexpr uint64_t kMaxChunks = 1ull << 22;  // per manifest
inline constexpr size_t kMaxPathBytes = 1024;
inline constexpr size_t kMaxManifestJsonBytes = 256ull << 20;
// A chunk's bytes are written under this suffix until the whole file is verified.
inline constexpr std::string_view kPartSuffix = ".exa-part";

struct ChunkRef {
  uint64_t offset = 0;  // in the file
  uint64_t size_bytes = 0;
  std::string sha256;  // lowercase hex
  bool operator==(const ChunkRef&) const = default;
};

struct FileEntry {
  std::string path;  // relative to the model directory, '/'-separated
  uint64_t size_bytes = 0;
  std::string sha256;
  std::vector<ChunkRef> chunks;
  bool operator==(const FileEntry&) const = default;
};

struct Manifest {
  std::string name;
  std::string version;
  uint64_t chunk_bytes = kDefaultChunkBytes;
  std::vector<FileEntry> files;  // sorted by path
  bool operator==(const Manifest&) const = default;

  uint64_t TotalBytes() const;
  uint64_t TotalChunks() const;
  const FileEntry* FindFile(std::string_view path) const;
};

// A file path inside the model directory: relative, '/'-separated, no empty, "." or ".."
// components, no control characters or backslashes, at most kMaxPathBytes.
absl::Status ValidateRelativePath(std::string_view path);
// Everything a manifest must satisfy (see the header comment).
absl::Status ValidateManifest(const Manifest& manifest);

// Canonical JSON (sorted keys, no whitespace), including "digest".
std::string ManifestToJson(const Manifest& manifest);
// The sha256 of the canonical JSON without "digest": the version's content name.
std::string ManifestDigest(const Manifest& manifest);
// Parses and validates; a "digest" field, when present, must match the content.
absl::StatusOr<Manifest> ParseManifestJson(std::string_view json);

// "name@version", "name:version" or "name" (version empty) as given to --model.
struct ModelSpec {
  std::string name;
  std::string version;
};
absl::StatusOr<ModelSpec> ParseModelSpec(std::string_view text);

}  // namespace exa::weights
