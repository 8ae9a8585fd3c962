#include "weights/layout.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>

#include "cluster/model_names.h"
#include "common/status.h"
#include "common/strings.h"
#include "weights/sha256.h"

namespace exa::weights {
namespace {

constexpr size_t kReadBlockBytes = 4 << 20;  // big enough to amortize syscalls, fits in L2/L3

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

}  // namespace

fs::path ModelDir(const fs::path& root, std::string_view name, std::string_view version) {
  return root / std::string(name) / std::string(version);
}
fs::path ManifestPath(const fs::path& root, std::string_view name, std::string_view version) {
  return root / std::string(name) / StrCat(version, cluster::kManifestSuffix);
}
fs::path StateDir(const fs::path& root, std::string_view name, std::string_view version) {
  return root / std::string(name) / StrCat(version, cluster::kStateSuffix);
}
fs::path PinPath(const fs::path& root, std::string_view name, std::string_view version) {
  return root / std::string(name) / StrCat(version, cluster::kPinSuffix);
}

fs::path LockPath(const fs::path& root, std::string_view name, std::string_view version) {
  return root / std::string(name) / StrCat(version, cluster::kLockSuffix);
}

absl::StatusOr<VersionLock> VersionLock::Acquire(const fs::path& root, std::string_view name,
                                                 std::string_view version, bool wait) {
  const fs::path path = LockPath(root, name, version);
  for (;;) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    if (ec) return ErrnoStatus(ec.value(), "create", path.parent_path());
    VersionLock lock(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644), path);
    if (lock.fd_ < 0) return ErrnoStatus(errno, "open", path);
    int rc;
    while ((rc = ::flock(lock.fd_, wait ? LOCK_EX : LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc != 0 && errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          StrCat("model ", name, "@", version, " in ", root.string(),
                 " is being pulled (or removed) by another process; try again when it is done"));
    }
    if (rc != 0) return ErrnoStatus(errno, "lock", path);
    struct stat held = {};
    struct stat named = {};
    if (::fstat(lock.fd_, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
      return lock;
    }
    // Removed (and perhaps made again) while this waited: lock what the path names now.
  }
}

VersionLock::VersionLock(VersionLock&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}

VersionLock::~VersionLock() {
  if (fd_ >= 0) ::close(fd_);
}

void VersionLock::RemoveFile() { ::unlink(path_.c_str()); }

absl::Status ErrnoStatus(int err, std::string_view what, const fs::path& path) {
  std::string msg = StrCat(what, " ", path.string(), ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
    return absl::ResourceExhaustedError(StrCat("disk full: ", msg));
  }
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

std::vector<ModelId> ListModelIds(const fs::path& root) {
  std::vector<ModelId> out;
  std::error_code ec;
  for (const auto& dir : fs::directory_iterator(root, ec)) {
    std::string name = dir.path().filename().string();
    if (!cluster::ValidateModelName("name", name).ok() || !dir.is_directory(ec)) continue;
    for (const auto& file : fs::directory_iterator(dir.path(), ec)) {
      std::string f = file.path().filename().string();
      if (f.size() <= cluster::kManifestSuffix.size() ||
          f.compare(f.size() - cluster::kManifestSuffix.size(), cluster::kManifestSuffix.size(),
                    cluster::kManifestSuffix) != 0) {
        continue;
      }
      std::string version = f.substr(0, f.size() - cluster::kManifestSuffix.size());
      if (cluster::ValidateModelVersion("version", version).ok()) out.push_back({name, version});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<Manifest> LoadManifest(const fs::path& root, std::string_view name,
                                      std::string_view version) {
  EXA_RETURN_IF_ERROR(cluster::ValidateModelName("model name", name));
  EXA_RETURN_IF_ERROR(cluster::ValidateModelVersion("model version", version));
  fs::path path = ManifestPath(root, name, version);
  auto text = ReadSmallFile(path, kMaxManifestJsonBytes);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(
          StrCat("model ", name, "@", version, " is not in ", root.string()));
    }
    // Too large to be a manifest: damaged; errno failures keep their code.
    if (absl::IsInvalidArgument(text.status())) {
      return absl::DataLossError(text.status().message());
    }
    return text.status();
  }
  auto manifest = ParseManifestJson(*text);
  // The name and version asked for are valid; a stored manifest that is not is damaged data
  // (DATA_LOSS), not a bad request.
  if (!manifest.ok()) {
    return absl::DataLossError(StrCat(path.string(), ": ", ToStd(manifest.status().message())));
  }
  if (manifest->name != name || manifest->version != version) {
    return absl::DataLossError(StrCat(path.string(), ": names ", manifest->name, "@",
                                      manifest->version, ", expected ", name, "@", version));
  }
  return manifest;
}

absl::Status SaveManifest(const fs::path& root, const Manifest& m) {
  EXA_RETURN_IF_ERROR(ValidateManifest(m));
  return WriteFileAtomically(ManifestPath(root, m.name, m.version), ManifestToJson(m) + "\n");
}

bool VersionLess(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::string_view na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      while (na.size() > 1 && na[0] == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb[0] == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie;
      j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

absl::StatusOr<std::string> NewestVersion(const std::vector<ModelId>& ids, std::string_view name) {
  std::string best;
  for (const ModelId& id : ids) {
    if (id.name == name && (best.empty() || VersionLess(best, id.version))) best = id.version;
  }
  if (best.empty()) return absl::NotFoundError(StrCat("model \"", name, "\": no version found"));
  return best;
}

absl::Status FsyncDirectory(const fs::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.fd < 0) return ErrnoStatus(errno, "open directory", dir);
  if (::fsync(fd.fd) != 0) return ErrnoStatus(errno, "fsync directory", dir);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const fs::path& path, std::string_view content) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return ErrnoStatus(ec.value(), "create directory", path.parent_path());
  // Unique per writer: concurrent writers of one path each rename a whole file.
  static std::atomic<uint64_t> counter{0};
  fs::path tmp = path;
  tmp += StrCat(".tmp.", ::getpid(), ".", counter++);
  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.fd < 0) return ErrnoStatus(errno, "create", tmp);
    size_t done = 0;
    while (done < content.size()) {
      ssize_t n = ::write(fd.fd, content.data() + done, content.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        return ErrnoStatus(err, "write", tmp);
      }
      done += static_cast<size_t>(n);
    }
    if (::fsync(fd.fd) != 0) {
      int err = errno;
      ::unlink(tmp.c_str());
      return ErrnoStatus(err, "fsync", tmp);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus(err, "rename into", path);
  }
  return FsyncDirectory(path.parent_path());
}

absl::StatusOr<std::string> ReadSmallFile(const fs::path& path, uint64_t max_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) return ErrnoStatus(errno, "open", path);
  struct stat st {};
  if (::fstat(fd.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) > max_bytes) {
    // Refused unread; the loop below still bounds a file that grows while read.
    return absl::InvalidArgumentError(
        StrCat(path.string(), ": ", st.st_size, " bytes, larger than ", max_bytes));
  }
  std::string out;
  char buf[64 << 10];
  while (true) {
    ssize_t n = ::read(fd.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read", path);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      return absl::InvalidArgumentError(
          StrCat(path.string(), ": larger than ", max_bytes, " bytes"));
    }
  }
  return out;
}

absl::StatusOr<FileDigest> HashFile(const fs::path& path, uint64_t chunk_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) return ErrnoStatus(errno, "open", path);
  ::posix_fadvise(fd.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  FileDigest out;
  Sha256 file_hash, chunk_hash;
  std::unique_ptr<char[]> buf(new char[kReadBlockBytes]);
  uint64_t in_chunk = 0;
  while (true) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(kReadBlockBytes, chunk_bytes - in_chunk));
    ssize_t n = ::read(fd.fd, buf.get(), want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read", path);
    if (n == 0) break;
    file_hash.Update(buf.get(), static_cast<size_t>(n));
    chunk_hash.Update(buf.get(), static_cast<size_t>(n));
    out.size_bytes += static_cast<uint64_t>(n);
    in_chunk += static_cast<uint64_t>(n);
    if (in_chunk == chunk_bytes) {
      out.chunk_sha256.push_back(chunk_hash.FinalHex());
      in_chunk = 0;
    }
  }
  if (in_chunk > 0) out.chunk_sha256.push_back(chunk_hash.FinalHex());
  out.sha256 = file_hash.FinalHex();
  return out;
}

absl::Status WritePiecesAt(int fd, const fs::path& path, uint64_t offset,
                           absl::Span<const std::string_view> pieces) {
  // IOV_MAX is 1024 on Linux; a 1 MiB message in 16 KiB HTTP/2 frames is 64 pieces.
  constexpr size_t kMaxIov = 1024;
  iovec iov[kMaxIov];
  size_t next = 0;  // first piece not yet written
  size_t skip = 0;  // bytes of pieces[next] already written
  while (next < pieces.size()) {
    size_t n = 0;
    for (size_t i = next; i < pieces.size() && n < kMaxIov; ++i) {
      size_t from = i == next ? skip : 0;
      if (pieces[i].size() == from) continue;
      iov[n].iov_base = const_cast<char*>(pieces[i].data() + from);
      iov[n].iov_len = pieces[i].size() - from;
      ++n;
    }
    if (n == 0) break;
    ssize_t wrote = ::pwritev(fd, iov, static_cast<int>(n), static_cast<off_t>(offset));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return ErrnoStatus(errno, "write", path);
    offset += static_cast<uint64_t>(wrote);
    // Advance past what was written.
    for (auto left = static_cast<size_t>(wrote); next < pieces.size();) {
      size_t rest = pieces[next].size() - skip;
      if (left < rest) {
        skip += left;
        break;
      }
      left -= rest;
      ++next;
      skip = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace exa::weights
