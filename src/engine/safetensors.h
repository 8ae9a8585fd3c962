// Memory-mapped safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw
// tensor bytes. Tensors are views into the mapping: no copy when the dtype is used as stored.
//
// The header is untrusted input. Every field is checked before any tensor byte is touched:
// known dtype, shape with sane rank and no overflow, offsets inside the data section, length
// equal to shape x dtype size, tensors not overlapping. A hostile file gets an error naming the
// file, the tensor and the field; it can never cause an out-of-bounds read.
//
// Thread safety: immutable after Open(); views stay valid while the SafetensorsFile lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/dtype.h"

namespace exa::engine {

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;

  int64_t NumElements() const;
};

// Read-only mmap of a whole file.
class MappedFile {
 public:
  // `resident`: read the whole file in and map every page before returning (MAP_POPULATE, then
  // one read per page, which also builds a hypervisor's shadow entries), so no access to the
  // mapping faults afterwards. Without it pages fault in on first use.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path,
                                                          bool resident = false);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* data_;
  size_t size_;
};

// Maps every file of `paths` resident (MappedFile::Open with resident), the files in parallel on
// up to `max_threads` threads (0: one per hardware thread; never more than the files): a model's
// shards load at the speed of the disk or the page cache, not of one core's page faults. The
// result is in the order of `paths`; the first error (naming its file) fails the whole load.
absl::StatusOr<std::vector<std::unique_ptr<MappedFile>>> MapFilesResident(
    const std::vector<std::string>& paths, int max_threads = 0);

// The largest header we accept; real checkpoints have headers of a few hundred KB.
inline constexpr size_t kMaxSafetensorsHeaderBytes = size_t{100} << 20;

// Parses and validates a whole safetensors image held in memory; `file` names it in errors.
// The returned views point into `image`. Exposed separately from the file for the fuzz target.
absl::StatusOr<std::map<std::string, TensorView>> ParseSafetensors(const uint8_t* image,
                                                                   size_t size,
                                                                   std::string_view file);

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses a file already mapped (by MapFilesResident); `path` names it in errors.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromMapped(
      std::string path, std::unique_ptr<MappedFile> file);

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorView> tensors_;
  // Tensors whose offset is not a multiple of their element size are copied here, so every
  // view handed out is aligned (rare: writers pad the header to 8 bytes).
  std::vector<std::unique_ptr<uint8_t[]>> realigned_;
};

}  // namespace exa::engine
