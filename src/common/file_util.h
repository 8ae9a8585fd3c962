// Small file-system helpers shared by modules that persist state or read their inputs whole.
// Thread-safety: plain functions over the file system, safe from any thread; concurrent writers
// of one path are the caller's to order.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace exa {

// Writes `contents` to `path` through `path`.tmp: write, fsync, rename. A crash or a reader at
// any moment sees the old file or the new one, never half of one. The file gets `mode`.
// UNAVAILABLE naming the file and errno's text on failure (the temporary file is removed).
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents,
                                 mode_t mode = 0644);

// The whole of `path`, read with at most `max_bytes` in memory: every caller names the most its
// file can sensibly hold, so a wrong path (a disk image, /dev/zero, a FIFO that never ends) is an
// error instead of an out-of-memory kill. Errors name the path:
//   NOT_FOUND         it cannot be opened (the message carries errno's text);
//   INVALID_ARGUMENT  it is a directory, or holds more than `max_bytes` (the message says the
//   limit); DATA_LOSS         a read failed part way.
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes);

}  // namespace exa
