// A fixed pool of worker threads for data-parallel loops in the CPU backend. ParallelFor splits
// [0, n) into contiguous chunks that the threads claim one at a time; the calling thread works
// too, then waits for the rest, so a pool of size 1 runs everything inline.
//
// A decode step runs about a hundred ParallelFor calls a few hundred microseconds apart, so
// waking workers through the kernel each time (tens of microseconds, more on a busy machine)
// would cost a large part of the step: between calls the workers spin on the job counter for up
// to `spin` and only then block, and the caller spins as long for the workers to finish. Both
// spins are short and bounded because on a machine with more runnable threads than cores a
// spinning thread holds the core the thread it waits for needs (docs/architecture.md#cpu-backend).
//
// Thread safety: ParallelFor is called by one thread at a time (the engine thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace exa::engine::cpu {

class ThreadPool {
 public:
  // `threads` counts the caller: 1 means no worker threads. Workers spin for `spin` after each
  // job before they block.
  explicit ThreadPool(int threads, absl::Duration spin = absl::Microseconds(50));
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(begin, end) over disjoint chunks covering [0, n); at most `chunks` of them (0 means
  // one per thread).
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t chunks = 0);

 private:
  void WorkerLoop();
  // Returns the job generation after `seen`, or 0 once stopping; spins, then blocks.
  uint64_t AwaitJob(uint64_t seen);
  void RunChunks();
  // Returns once pending_ is 0: spins, then blocks.
  void AwaitWorkers();

  const int64_t spin_ns_;
  std::vector<std::thread> workers_;
  // The job. fn_, n_ and chunk_ are written by ParallelFor before it bumps generation_ (release)
  // and read by workers after they see the bump (acquire); ParallelFor returns only when every
  // worker is done with them (pending_ == 0).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_{0};     // next chunk start
  std::atomic<int64_t> pending_{0};  // workers that have not finished this generation
  std::atomic<bool> stop_{false};
  // Threads that spun out sleep here.
  absl::Mutex mu_;
  absl::CondVar work_cv_;  // generation_ or stop_ changed
  absl::CondVar done_cv_;  // pending_ reached 0
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
  bool caller_waiting_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace exa::engine::cpu
