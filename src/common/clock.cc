#include "common/clock.h"

#include <time.h>

#include "absl/time/clock.h"

namespace exa {

absl::Time SystemClock::Now() const { return absl::Now(); }

absl::Time SystemClock::MonotonicNow() const {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::UnixEpoch() + absl::Seconds(ts.tv_sec) + absl::Nanoseconds(ts.tv_nsec);
}

SystemClock& SystemClock::Get() {
  static SystemClock* clock = new SystemClock();
  return *clock;
}

}  // namespace exa
