#include "daemon/node_identity.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/chars.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::daemon {
namespace {

absl::Status ErrnoError(std::string_view what, const std::string& path) {
  return absl::PermissionDeniedError(StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

std::string NodeIdError(const std::string& id) {
  if (!id.empty() && id.size() <= 64 && OnlyAlnumOr(id, "-_.")) return "";
  return StrCat("\"", id.substr(0, 80), "\": expected 1-64 of [A-Za-z0-9._-]");
}

std::string NewUuid() {
  std::random_device rd;
  uint8_t b[16];
  for (int i = 0; i < 16; i += 4) {
    uint32_t r = rd();
    std::memcpy(b + i, &r, 4);
  }
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  return fmt::format(
      "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-"
      "{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
      b[15]);
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  std::string tmp = StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot write", tmp);
  bool ok = write(fd, contents.data(), contents.size()) == static_cast<ssize_t>(contents.size()) &&
            fsync(fd) == 0;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = ErrnoError("cannot write", path);
    unlink(tmp.c_str());
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LoadOrCreateNodeId(const std::string& data_dir,
                                               const std::string& configured_id) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(StrCat("data dir ", data_dir, " cannot be created: ",
                                              ec.message(), " (set another with --data-dir)"));
  }
  if (access(data_dir.c_str(), W_OK) != 0) {
    return absl::PermissionDeniedError(StrCat("data dir ", data_dir,
                                              " is not writable: ", std::strerror(errno),
                                              " (set another with --data-dir)"));
  }
  std::string path = data_dir + "/node_id";
  if (!configured_id.empty()) {
    if (std::string error = NodeIdError(configured_id); !error.empty()) {
      return absl::InvalidArgumentError(StrCat("node.id ", error));
    }
    EXA_RETURN_IF_ERROR(WriteFileAtomically(path, configured_id + "\n"));
    return configured_id;
  }
  std::ifstream in(path);
  std::string id;
  if (in && std::getline(in, id)) {
    if (NodeIdError(id).empty()) return id;
    // Never replaced silently: the id is this node's identity in the cluster (placement, the
    // spec store, metrics). Someone edited or damaged the file.
    return absl::FailedPreconditionError(StrCat(path, " holds ", NodeIdError(id),
                                                "; fix it, remove it (a new id is made), or ",
                                                "set --node-id"));
  }
  id = NewUuid();
  EXA_RETURN_IF_ERROR(WriteFileAtomically(path, id + "\n"));
  return id;
}

absl::StatusOr<uint32_t> NextIncarnation(const std::string& data_dir) {
  std::string path = data_dir + "/incarnation";
  uint64_t stored = 0;
  std::ifstream in(path);
  if (in) in >> stored;
  // Seconds since 2024-01-01: grows faster than any run refutes, fits u32 until 2160.
  constexpr int64_t kEpoch2024 = 1704067200;
  int64_t clock = std::max<int64_t>(0, time(nullptr) - kEpoch2024);
  uint64_t next = std::max<uint64_t>(stored + 1, static_cast<uint64_t>(clock));
  if (next > UINT32_MAX - 1'000'000) {
    return absl::OutOfRangeError(StrCat(path, ": incarnation ", next, " is exhausted"));
  }
  EXA_RETURN_IF_ERROR(WriteFileAtomically(path, StrCat(next, "\n")));
  return static_cast<uint32_t>(next);
}

absl::StatusOr<DataDirLock> DataDirLock::Acquire(const std::string& data_dir) {
  const std::string path = data_dir + "/lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {0};
    const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string holder(pid, n > 0 ? static_cast<size_t>(n) : 0);
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      return absl::FailedPreconditionError(
          StrCat("data dir ", data_dir, " is in use by another exaserved",
                 holder.empty() ? std::string() : StrCat(" (pid ", holder, ")"),
                 ": each node needs a data dir of its own (--data-dir)"));
    }
    return absl::FailedPreconditionError(StrCat(path, ": cannot lock: ", std::strerror(err)));
  }
  // The holder's pid, for the message a second daemon gets: advice only, the flock holds
  // whether or not it is written.
  const std::string me = StrCat(::getpid(), "\n");
  [[maybe_unused]] const bool noted =
      ::ftruncate(fd, 0) == 0 &&
      ::pwrite(fd, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size());
  return DataDirLock(fd);
}

DataDirLock::~DataDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace exa::daemon
