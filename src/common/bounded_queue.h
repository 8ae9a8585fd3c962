// A multi-producer multi-consumer FIFO with a fixed capacity (docs/architecture.md#module-map rule
// 5: every queue is bounded). TryPush never blocks: a full queue is an explicit, immediate
// rejection the caller turns into RESOURCE_EXHAUSTED. Close() wakes every waiter; a closed queue
// accepts nothing and drains what it holds.
//
// Thread safety: all members may be called concurrently.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/check.h"

namespace exa {

enum class PushResult { kOk, kFull, kClosed };

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {
    EXA_CHECK(capacity > 0) << "a queue needs room for one item";
  }

  PushResult TryPush(T item) {
    absl::MutexLock lock(&mu_);
    if (closed_) return PushResult::kClosed;
    if (items_.size() >= capacity_) return PushResult::kFull;
    items_.push_back(std::move(item));
    return PushResult::kOk;
  }

  // As TryPush, with room for `headroom` items beyond the capacity: a small, still bounded lane
  // for work ordinary overload must not refuse (a replica's health probes).
  PushResult TryPushWithHeadroom(T item, size_t headroom) {
    absl::MutexLock lock(&mu_);
    if (closed_) return PushResult::kClosed;
    if (items_.size() >= capacity_ + headroom) return PushResult::kFull;
    items_.push_back(std::move(item));
    return PushResult::kOk;
  }

  // Non-blocking pop.
  std::optional<T> TryPop() {
    absl::MutexLock lock(&mu_);
    return PopLocked();
  }

  // Waits until an item arrives, the queue is closed and empty, or `timeout` passes.
  std::optional<T> PopWithTimeout(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return closed_ || !items_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    return PopLocked();
  }

  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

  size_t size() const {
    absl::MutexLock lock(&mu_);
    return items_.size();
  }
  size_t capacity() const { return capacity_; }
  bool closed() const {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

 private:
  std::optional<T> PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<T> items_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace exa
