// Clock: the one way ExaServe code reads time. Sans-IO cores take `now` as an argument; services
// get a Clock injected so tests can drive a ManualClock (docs/architecture.md#module-map rule 1).
//
// Thread safety: all implementations are safe to call from any thread.
#pragma once

#include <atomic>

#include "absl/time/time.h"

namespace exa {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time, for timestamps shown to people and stored in records.
  virtual absl::Time Now() const = 0;
  // Monotonic time, for intervals and deadlines; never jumps backwards.
  virtual absl::Time MonotonicNow() const = 0;
};

class SystemClock final : public Clock {
 public:
  absl::Time Now() const override;
  absl::Time MonotonicNow() const override;
  // A process-wide instance; never destroyed.
  static SystemClock& Get();
};

// A clock that moves only when told to; wall and monotonic time are the same.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24 * 365 * 56))
      : now_ns_(absl::ToUnixNanos(start)) {}
  absl::Time Now() const override { return absl::FromUnixNanos(now_ns_.load()); }
  absl::Time MonotonicNow() const override { return Now(); }
  void Advance(absl::Duration d) { now_ns_.fetch_add(absl::ToInt64Nanoseconds(d)); }
  void Set(absl::Time t) { now_ns_.store(absl::ToUnixNanos(t)); }

 private:
  std::atomic<int64_t> now_ns_;
};

}  // namespace exa
