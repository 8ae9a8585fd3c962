// A fixed pool of worker threads for data-parallel loops in the CPU backend. ParallelFor splits
// [0, n) into contiguous chunks; the calling thread works too, then waits for the rest, so a pool
// of size 1 runs everything inline.
//
// Thread safety: ParallelFor is called by one thread at a time (the engine thread).
#pragma once

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace exa::engine::cpu {

class ThreadPool {
 public:
  // `threads` counts the caller: 1 means no worker threads.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(begin, end) over disjoint chunks covering [0, n); at most `chunks` of them (0 means
  // one per thread).
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t chunks = 0);

 private:
  void WorkerLoop();
  void RunChunks();

  std::vector<std::thread> workers_;
  absl::Mutex mu_;
  absl::CondVar work_cv_;                         // generation_ or stop_ changed
  absl::CondVar done_cv_;                         // pending_ reached 0
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped for each ParallelFor
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  const std::function<void(int64_t, int64_t)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t n_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t chunk_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;     // next chunk start
  int64_t pending_ ABSL_GUARDED_BY(mu_) = 0;  // workers that have not finished this generation
};

}  // namespace exa::engine::cpu
