#include "engine/cpu/thread_pool.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace exa::engine::cpu {
namespace {

inline void Relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int threads, absl::Duration spin)
    : spin_ns_(absl::ToInt64Nanoseconds(spin)) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    absl::MutexLock lock(&mu_);
    work_cv_.SignalAll();
  }
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  while (true) {
    const int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) return;
    (*fn_)(begin, std::min(n_, begin + chunk_));
  }
}

uint64_t ThreadPool::AwaitJob(uint64_t seen) {
  const int64_t deadline = absl::GetCurrentTimeNanos() + spin_ns_;
  for (uint32_t spins = 1; spin_ns_ > 0; ++spins) {
    const uint64_t g = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return 0;
    if (g != seen) return g;
    Relax();
    if (spins % 64 == 0 && absl::GetCurrentTimeNanos() > deadline) break;
  }
  absl::MutexLock lock(&mu_);
  ++sleepers_;
  while (!stop_.load() && generation_.load(std::memory_order_acquire) == seen) work_cv_.Wait(&mu_);
  --sleepers_;
  return stop_.load() ? 0 : generation_.load(std::memory_order_acquire);
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    seen = AwaitJob(seen);
    if (seen == 0) return;
    RunChunks();
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The caller checks pending_ under mu_ before it blocks, so it either sees 0 or is
      // waiting here.
      absl::MutexLock lock(&mu_);
      if (caller_waiting_) done_cv_.Signal();
    }
  }
}

void ThreadPool::AwaitWorkers() {
  const int64_t deadline = absl::GetCurrentTimeNanos() + spin_ns_;
  for (uint32_t spins = 1; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    Relax();
    if (spin_ns_ > 0 && (spins % 64 != 0 || absl::GetCurrentTimeNanos() <= deadline)) continue;
    absl::MutexLock lock(&mu_);
    caller_waiting_ = true;
    while (pending_.load(std::memory_order_acquire) != 0) done_cv_.Wait(&mu_);
    caller_waiting_ = false;
    return;
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                             int64_t chunks) {
  if (n <= 0) return;
  if (chunks <= 0) chunks = size();
  chunks = std::min(chunks, n);
  if (workers_.empty() || chunks == 1) {
    fn(0, n);
    return;
  }
  fn_ = &fn;
  n_ = n;
  chunk_ = (n + chunks - 1) / chunks;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<int64_t>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  {
    // A worker that blocked checks generation_ under mu_ before it waits, so it either sees the
    // bump or is counted here.
    absl::MutexLock lock(&mu_);
    if (sleepers_ > 0) work_cv_.SignalAll();
  }
  RunChunks();
  AwaitWorkers();
  fn_ = nullptr;
}

}  // namespace exa::engine::cpu
