#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace exa::engine {
namespace {

using nlohmann::json;

constexpr size_t kMaxRank = 8;
constexpr int64_t kMaxElements = int64_t{1} << 40;  // 1 T elements: far beyond any one tensor

absl::Status TensorError(std::string_view file, std::string_view tensor, std::string_view field,
                         std::string_view what) {
  return absl::InvalidArgumentError(
      StrCat(file, ": tensor \"", tensor, "\" field ", field, ": ", what));
}

struct Entry {
  std::string name;
  TensorView view;
  uint64_t begin = 0;
  uint64_t end = 0;
};

absl::StatusOr<std::vector<int64_t>> ParseShape(const json& v, std::string_view file,
                                                std::string_view name, int64_t* elements) {
  if (!v.is_array() || v.size() > kMaxRank) {
    return TensorError(file, name, "shape",
                       StrCat("must be a list of at most ", kMaxRank, " dimensions"));
  }
  std::vector<int64_t> shape;
  int64_t n = 1;
  for (const json& d : v) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(kMaxElements)) {
      return TensorError(file, name, "shape",
                         StrCat(v.dump(), " has a dimension that is not a size"));
    }
    int64_t dim = d.get<int64_t>();
    if (dim != 0 && n > kMaxElements / dim) {
      return TensorError(file, name, "shape", StrCat(v.dump(), " has too many elements"));
    }
    n *= dim;
    shape.push_back(dim);
  }
  *elements = n;
  return shape;
}

absl::StatusOr<Entry> ParseEntry(const std::string& name, const json& v, std::string_view file,
                                 uint64_t data_size) {
  if (!v.is_object()) return TensorError(file, name, "(entry)", "must be an object");
  Entry e;
  e.name = name;
  auto dtype = v.find("dtype");
  if (dtype == v.end() || !dtype->is_string())
    return TensorError(file, name, "dtype", "is missing");
  auto parsed = ParseDType(dtype->get<std::string>());
  if (!parsed) {
    return TensorError(file, name, "dtype",
                       StrCat(dtype->dump(), " is not supported; expected F32, F16 or BF16"));
  }
  e.view.dtype = *parsed;
  auto shape = v.find("shape");
  if (shape == v.end()) return TensorError(file, name, "shape", "is missing");
  int64_t elements = 0;
  EXA_ASSIGN_OR_RETURN(e.view.shape, ParseShape(*shape, file, name, &elements));
  auto offsets = v.find("data_offsets");
  if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return TensorError(file, name, "data_offsets",
                       "must be [begin, end] with non-negative integers");
  }
  e.begin = (*offsets)[0].get<uint64_t>();
  e.end = (*offsets)[1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_size) {
    return TensorError(file, name, "data_offsets",
                       StrCat("[", e.begin, ", ", e.end, "] is not inside the data section of ",
                              data_size, " bytes"));
  }
  const uint64_t want = static_cast<uint64_t>(elements) * DTypeBytes(e.view.dtype);
  if (e.end - e.begin != want) {
    return TensorError(
        file, name, "data_offsets",
        StrCat("span of ", e.end - e.begin, " bytes does not match shape ", shape->dump(), " x ",
               DTypeName(e.view.dtype), " = ", want, " bytes"));
  }
  e.view.bytes = static_cast<size_t>(want);
  return e;
}

absl::Status CheckNoOverlap(std::vector<Entry>& entries, std::string_view file) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].begin < entries[i - 1].end) {
      return TensorError(file, entries[i].name, "data_offsets",
                         StrCat("overlaps tensor \"", entries[i - 1].name, "\""));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path,
                                                             bool resident) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(StrCat(path, ": fstat: ", std::strerror(errno)));
  }
  size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | (resident ? MAP_POPULATE : 0), fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return absl::InternalError(StrCat(path, ": mmap: ", std::strerror(errno)));
    }
    data = static_cast<const uint8_t*>(p);
    if (resident) {
      // MAP_POPULATE maps what the page cache holds; a page it could not bring in (memory
      // pressure) faults here instead of in the first request. Under a hypervisor with shadow
      // paging this first read of each page is also what builds its shadow entry.
      const long page = ::sysconf(_SC_PAGESIZE);
      volatile uint8_t sink = 0;
      for (size_t i = 0; i < size; i += static_cast<size_t>(page)) sink = sink ^ data[i];
    }
  }
  ::close(fd);  // the mapping keeps the file alive
  return std::unique_ptr<MappedFile>(new MappedFile(data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

absl::StatusOr<std::map<std::string, TensorView>> ParseSafetensors(const uint8_t* image,
                                                                   size_t size,
                                                                   std::string_view file) {
  if (size < 8) {
    return absl::InvalidArgumentError(
        StrCat(file, ": ", size, " bytes is too short for a safetensors header"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | image[i];
  if (header_len > kMaxSafetensorsHeaderBytes || header_len > size - 8) {
    return absl::InvalidArgumentError(
        StrCat(file, ": header length ", header_len, " exceeds the file (", size,
               " bytes) or the limit of ", kMaxSafetensorsHeaderBytes, " bytes"));
  }
  const char* text = reinterpret_cast<const char*>(image + 8);
  json header = json::parse(text, text + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::InvalidArgumentError(StrCat(file, ": header is not a JSON object"));
  }
  const uint8_t* data = image + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<Entry> entries;
  try {
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      EXA_ASSIGN_OR_RETURN(Entry e, ParseEntry(it.key(), it.value(), file, data_size));
      entries.push_back(std::move(e));
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat(file, ": header: ", e.what()));
  }
  EXA_RETURN_IF_ERROR(CheckNoOverlap(entries, file));
  std::map<std::string, TensorView> out;
  for (Entry& e : entries) {
    e.view.data = data + e.begin;
    out.emplace(std::move(e.name), std::move(e.view));
  }
  return out;
}

absl::StatusOr<std::vector<std::unique_ptr<MappedFile>>> MapFilesResident(
    const std::vector<std::string>& paths, int max_threads) {
  std::vector<std::unique_ptr<MappedFile>> files(paths.size());
  std::vector<absl::Status> errors(paths.size());
  size_t threads = max_threads > 0 ? static_cast<size_t>(max_threads)
                                   : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min(threads, paths.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < paths.size();) {
      auto f = MappedFile::Open(paths[i], /*resident=*/true);
      if (f.ok()) {
        files[i] = *std::move(f);
      } else {
        errors[i] = f.status();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const absl::Status& e : errors) EXA_RETURN_IF_ERROR(e);
  return files;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  EXA_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  return FromMapped(path, std::move(file));
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromMapped(
    std::string path, std::unique_ptr<MappedFile> file) {
  auto f = std::make_unique<SafetensorsFile>();
  f->path_ = std::move(path);
  f->file_ = std::move(file);
  EXA_ASSIGN_OR_RETURN(f->tensors_, ParseSafetensors(f->file_->data(), f->file_->size(), f->path_));
  for (auto& [name, view] : f->tensors_) {
    if (reinterpret_cast<uintptr_t>(view.data) % DTypeBytes(view.dtype) == 0) continue;
    auto copy = std::make_unique<uint8_t[]>(view.bytes);
    std::memcpy(copy.get(), view.data, view.bytes);
    view.data = copy.get();
    f->realigned_.push_back(std::move(copy));
  }
  return f;
}

}  // namespace exa::engine
