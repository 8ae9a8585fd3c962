// Quantiles over the most recent samples of a latency (time to first token, inter-token
// latency) for the load report the router reads. A fixed ring: memory is bounded and old traffic
// ages out after `capacity` samples.
//
// Thread safety: none; the engine guards it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace exa::engine {

class LatencyWindow {
 public:
  explicit LatencyWindow(size_t capacity = 1024) : capacity_(capacity) {}

  void Add(double value_ms) {
    if (samples_.size() < capacity_) {
      samples_.push_back(value_ms);
    } else {
      samples_[next_] = value_ms;
    }
    next_ = (next_ + 1) % capacity_;
  }

  // The q-quantile (nearest rank) of the window; 0 when empty.
  double Quantile(double q) const {
    if (samples_.empty()) return 0.0;
    std::vector<double> sorted = samples_;
    const size_t rank = std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()));
    std::nth_element(sorted.begin(), sorted.begin() + rank, sorted.end());
    return sorted[rank];
  }
  size_t size() const { return samples_.size(); }

 private:
  size_t capacity_;
  size_t next_ = 0;
  std::vector<double> samples_;
};

}  // namespace exa::engine
