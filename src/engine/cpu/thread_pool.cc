#include "engine/cpu/thread_pool.h"

#include <algorithm>

namespace exa::engine::cpu {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  while (true) {
    int64_t begin;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_ >= n_) return;
      begin = next_;
      next_ = std::min(n_, next_ + chunk_);
    }
    (*fn_)(begin, std::min(n_, begin + chunk_));
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunChunks();
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
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
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + chunks - 1) / chunks;
    next_ = 0;
    pending_ = static_cast<int64_t>(workers_.size());
    ++generation_;
  }
  work_cv_.notify_all();
  RunChunks();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
}

}  // namespace exa::engine::cpu
