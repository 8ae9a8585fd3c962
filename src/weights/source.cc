#include "weights/source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "cluster/model_names.h"
#include "common/status.h"
#include "common/strings.h"
#include "weights/layout.h"

namespace exa::weights {

ChunkReader::~ChunkReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<size_t> ChunkReader::ReadAt(uint64_t offset, char* buf, size_t n) const {
  if (offset >= size_) return 0;
  n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd_, buf + done, n - done, static_cast<off_t>(base_ + offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::InternalError(StrCat("read chunk: ", std::strerror(errno)));
    if (got == 0) return absl::DataLossError("chunk file is shorter than its manifest says");
    done += static_cast<size_t>(got);
  }
  return done;
}

absl::StatusOr<const ChunkRef*> FindChunk(const Manifest& manifest, const ChunkKey& key) {
  const FileEntry* file = manifest.FindFile(key.path);
  if (file == nullptr) {
    return absl::NotFoundError(
        StrCat("model ", key.name, ":", key.version, " has no file \"", key.path, "\""));
  }
  if (key.chunk_index >= file->chunks.size()) {
    return absl::InvalidArgumentError(StrCat("chunk_index ", key.chunk_index, ": file \"", key.path,
                                             "\" has ", file->chunks.size(), " chunks"));
  }
  return &file->chunks[key.chunk_index];
}

absl::StatusOr<std::vector<ModelRef>> DirectorySource::ListModels() {
  std::vector<ModelRef> out;
  std::map<ModelId, Listed> listed;
  absl::MutexLock lock(&mu_);
  for (const ModelId& id : ListModelIds(root_)) {
    struct stat st {};
    if (::stat(ManifestPath(root_, id.name, id.version).c_str(), &st) != 0) continue;
    const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    auto it = listed_.find(id);
    Listed entry;
    if (it != listed_.end() && it->second.mtime_ns == mtime_ns &&
        it->second.size == static_cast<uint64_t>(st.st_size)) {
      entry = it->second;
    } else {
      entry = {mtime_ns, static_cast<uint64_t>(st.st_size), ""};
      auto m = LoadManifest(root_, id.name, id.version);
      if (m.ok()) entry.digest = ManifestDigest(*m);  // else half-written or damaged: no model
    }
    if (!entry.digest.empty()) out.push_back({id.name, id.version, entry.digest});
    listed.emplace(id, std::move(entry));
  }
  listed_ = std::move(listed);  // forgets manifests gone since
  return out;
}

absl::StatusOr<Manifest> DirectorySource::GetManifest(const std::string& name,
                                                      const std::string& version) {
  EXA_RETURN_IF_ERROR(cluster::ValidateModelName("model name", name));
  std::string v = version;
  if (v.empty()) {
    EXA_ASSIGN_OR_RETURN(v, NewestVersion(ListModelIds(root_), name));
  }
  return LoadManifest(root_, name, v);
}

absl::StatusOr<std::unique_ptr<ChunkReader>> DirectorySource::OpenChunk(
    const ChunkKey& key, const std::function<bool()>&) {
  EXA_RETURN_IF_ERROR(cluster::ValidateModelVersion("model version", key.version));
  EXA_RETURN_IF_ERROR(ValidateRelativePath(key.path));
  EXA_ASSIGN_OR_RETURN(Manifest m, LoadManifest(root_, key.name, key.version));
  EXA_ASSIGN_OR_RETURN(const ChunkRef* chunk, FindChunk(m, key));
  fs::path path = ModelDir(root_, key.name, key.version) / key.path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(StrCat("model ", key.name, ":", key.version, " file \"", key.path,
                                        "\" is not here (yet)"));
    }
    return ErrnoStatus(errno, "open", path);
  }
  auto reader = std::make_unique<ChunkReader>(fd, chunk->offset, chunk->size_bytes);
  struct stat st {};
  const FileEntry* file = m.FindFile(key.path);
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != file->size_bytes) {
    return absl::DataLossError(
        StrCat(path.string(), ": ", st.st_size, " bytes, the manifest says ", file->size_bytes));
  }
  return reader;
}

}  // namespace exa::weights
