#include "engine/cpu/thread_pool.h"

#include <algorithm>

namespace exa::engine::cpu {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  work_cv_.SignalAll();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  while (true) {
    int64_t begin, end;
    const std::function<void(int64_t, int64_t)>* fn;
    {
      absl::MutexLock lock(&mu_);
      if (next_ >= n_) return;
      begin = next_;
      end = std::min(n_, next_ + chunk_);
      next_ = end;
      fn = fn_;
    }
    (*fn)(begin, end);
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && generation_ == seen) work_cv_.Wait(&mu_);
      if (stop_) return;
      seen = generation_;
    }
    RunChunks();
    absl::MutexLock lock(&mu_);
    if (--pending_ == 0) done_cv_.Signal();
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
  {
    absl::MutexLock lock(&mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + chunks - 1) / chunks;
    next_ = 0;
    pending_ = static_cast<int64_t>(workers_.size());
    ++generation_;
  }
  work_cv_.SignalAll();
  RunChunks();
  absl::MutexLock lock(&mu_);
  while (pending_ != 0) done_cv_.Wait(&mu_);
  fn_ = nullptr;
}

}  // namespace exa::engine::cpu
