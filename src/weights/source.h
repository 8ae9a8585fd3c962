// What the Weights service serves, whatever holds the bytes: an origin directory, a node's cache
// directory, or a rack cache that fetches misses from upstream. The gRPC adapter
// (weights_service.h) turns one of these into exaserve.v1.Weights.
//
// Thread safety: implementations are called from many gRPC threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "weights/layout.h"
#include "weights/manifest.h"

namespace exa::weights {

struct ModelRef {
  std::string name;
  std::string version;
  std::string manifest_digest;
};

// One chunk of one file of one model version.
struct ChunkKey {
  std::string name;
  std::string version;
  std::string path;
  uint32_t chunk_index = 0;
};

// An open chunk: reads go to a file descriptor held open, so the bytes stay readable even when
// the cache evicts (unlinks) the file meanwhile.
class ChunkReader {
 public:
  ChunkReader(int fd, uint64_t base, uint64_t size) : fd_(fd), base_(base), size_(size) {}
  ~ChunkReader();
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;

  uint64_t size() const { return size_; }
  // Reads up to `n` bytes at `offset` within the chunk; fewer only at its end.
  absl::StatusOr<size_t> ReadAt(uint64_t offset, char* buf, size_t n) const;

  // A source that has not checked these bytes since it started asks the server to hash them
  // while it streams the whole chunk, and to report whether they matched `expected_sha256`
  // (a rack cache drops a chunk that went bad on its disk, so the next request refetches it).
  void RequestVerification(std::string expected_sha256, std::function<void(bool)> report) {
    expected_sha256_ = std::move(expected_sha256);
    report_ = std::move(report);
  }
  const std::string& expected_sha256() const { return expected_sha256_; }
  void ReportVerified(bool ok) {
    if (report_) report_(ok);
  }

 private:
  int fd_;
  uint64_t base_;
  uint64_t size_;
  std::string expected_sha256_;
  std::function<void(bool)> report_;
};

class WeightsSource {
 public:
  virtual ~WeightsSource() = default;
  virtual absl::StatusOr<std::vector<ModelRef>> ListModels() = 0;
  // An empty version means the newest one.
  virtual absl::StatusOr<Manifest> GetManifest(const std::string& name,
                                               const std::string& version) = 0;
  // May block (a rack cache fetching a miss upstream); gives up when `cancelled` turns true.
  virtual absl::StatusOr<std::unique_ptr<ChunkReader>> OpenChunk(
      const ChunkKey& key, const std::function<bool()>& cancelled) = 0;
};

// Looks the key's chunk up in the manifest: INVALID_ARGUMENT / NOT_FOUND name what is wrong.
absl::StatusOr<const ChunkRef*> FindChunk(const Manifest& manifest, const ChunkKey& key);

// Serves the models of a directory in the layout.h layout: an origin (`--origin-dir`) or a
// node cache, whose files exist under their final names only once verified.
class DirectorySource final : public WeightsSource {
 public:
  explicit DirectorySource(std::string root) : root_(std::move(root)) {}
  absl::StatusOr<std::vector<ModelRef>> ListModels() override;
  absl::StatusOr<Manifest> GetManifest(const std::string& name,
                                       const std::string& version) override;
  absl::StatusOr<std::unique_ptr<ChunkReader>> OpenChunk(
      const ChunkKey& key, const std::function<bool()>& cancelled) override;

 private:
  const std::string root_;
  // ListModels' digests by manifest, kept while the file's size and mtime stay the same: a
  // listing stats each manifest and parses only new or changed ones.
  struct Listed {
    int64_t mtime_ns = 0;
    uint64_t size = 0;
    std::string digest;  // "" when the manifest did not load: not a model
  };
  absl::Mutex mu_;
  std::map<ModelId, Listed> listed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exa::weights
