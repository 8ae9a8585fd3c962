#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace exa
