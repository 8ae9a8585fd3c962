#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/strings.h"

namespace exa {

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents, mode_t mode) {
  const std::string tmp = StrCat(path, ".tmp");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return absl::UnavailableError(StrCat(tmp, ": ", std::strerror(errno)));
  bool ok = ::fchmod(fd, mode) == 0;  // open's mode is filtered by the umask
  for (size_t done = 0; ok && done < contents.size();) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  int saved = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) saved = errno;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(StrCat(path, ": ", std::strerror(saved)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(StrCat(path, ": cannot read: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(StrCat(path, ": is a directory, not a file"));
  }
  // Reads one byte past the limit, so a file of exactly `max_bytes` passes and a larger one is
  // caught without reading it all. st_size only sizes the first buffer: it is 0 for /proc files
  // and FIFOs, and a file can grow while it is read.
  const size_t hint = S_ISREG(st.st_mode) ? static_cast<size_t>(st.st_size) + 1 : 0;
  std::string out(std::min(max_bytes + 1, std::max<size_t>(hint, 4096)), '\0');
  size_t done = 0;
  while (done <= max_bytes) {
    if (done == out.size()) out.resize(std::min(max_bytes + 1, out.size() * 2));
    ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      return absl::DataLossError(StrCat(path, ": read failed: ", std::strerror(saved)));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done > max_bytes) {
    return absl::InvalidArgumentError(
        StrCat(path, ": larger than ", max_bytes, " bytes, the most this file may hold"));
  }
  out.resize(done);
  return out;
}

}  // namespace exa
