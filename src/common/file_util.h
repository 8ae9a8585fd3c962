// Small file-system helpers shared by modules that persist state.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace exa {

// Writes `contents` to `path` through `path`.tmp: write, fsync, rename. A crash or a reader at
// any moment sees the old file or the new one, never half of one. The file gets `mode`.
// UNAVAILABLE naming the file and errno's text on failure (the temporary file is removed).
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents,
                                 mode_t mode = 0644);

}  // namespace exa
