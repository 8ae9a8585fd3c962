#include "common/malloc_tuning.h"

#include <cstdlib>
#include <initializer_list>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace exa {

void TuneMalloc() {
#if defined(__GLIBC__)
  for (const char* name : {"GLIBC_TUNABLES", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return;  // the operator's choice stands
  }
  constexpr int kTrimThreshold = 128 << 20;
  constexpr int kMmapThreshold = 4 << 20;
  ::mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
  ::mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
#endif
}

}  // namespace exa
