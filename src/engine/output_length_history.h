// A replica's recent history of completed output lengths, for the router's estimate of decode
// work still owed to a running sequence. Clients send max_tokens far above what they get (every
// client of a chat service sends 2048, say), so counting remaining max_tokens makes every
// request look the same; the engine never knows a request's true length either, so it predicts
// from what its recent requests actually produced.
//
// The estimate for a sequence that has generated g tokens is E[L - g | L > g] over the window's
// empirical distribution of lengths L (the mean residual length of requests that lived at least
// that long), capped by what the sequence may still produce (max_tokens and context left). A
// sequence that has outlived every length in the window gets g more (heavy-tailed lengths: the
// longer it has run, the longer it is likely to run), capped likewise. Until `min_samples`
// lengths are seen the estimate is the cap itself (the conservative max_tokens count).
//
// Memory is bounded: a ring of `capacity` lengths; old traffic ages out.
// Thread safety: none; the engine thread owns it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace exa::engine {

class OutputLengthHistory {
 public:
  explicit OutputLengthHistory(size_t capacity = 512, size_t min_samples = 16)
      : capacity_(std::max<size_t>(1, capacity)), min_samples_(std::max<size_t>(1, min_samples)) {}

  // A request finished (end of sequence, stop, or max_tokens) after `length` generated tokens.
  void Add(int32_t length) {
    length = std::max(0, length);
    if (ring_.size() < capacity_) {
      ring_.push_back(length);
    } else {
      ring_[next_] = length;
    }
    next_ = (next_ + 1) % capacity_;
    dirty_ = true;
  }

  bool ready() const { return ring_.size() >= min_samples_; }
  size_t size() const { return ring_.size(); }

  // Expected decode tokens still to come for a sequence that generated `generated` tokens and
  // may produce at most `cap` more.
  int64_t ExpectedRemaining(int32_t generated, int64_t cap) const {
    if (cap <= 0) return 0;
    if (!ready()) return cap;
    Sort();
    // Lengths strictly greater than `generated`: the requests that were still running at g.
    const auto first = std::upper_bound(sorted_.begin(), sorted_.end(), generated);
    const size_t index = static_cast<size_t>(first - sorted_.begin());
    const size_t n = sorted_.size() - index;
    int64_t expected;
    if (n == 0) {
      expected = std::max(1, generated);
    } else {
      const int64_t tail_sum = suffix_sum_[index];
      // Rounded up: a sequence still running has at least one token to come.
      expected = (tail_sum - static_cast<int64_t>(n) * generated + static_cast<int64_t>(n) - 1) /
                 static_cast<int64_t>(n);
    }
    return std::clamp<int64_t>(expected, 1, cap);
  }

  // Mean of the window (0 when empty): the expected length of a request not yet started.
  double Mean() const {
    if (ring_.empty()) return 0.0;
    Sort();
    return static_cast<double>(suffix_sum_[0]) / static_cast<double>(sorted_.size());
  }

 private:
  void Sort() const {
    if (!dirty_) return;
    sorted_ = ring_;
    std::sort(sorted_.begin(), sorted_.end());
    suffix_sum_.assign(sorted_.size() + 1, 0);
    for (size_t i = sorted_.size(); i-- > 0;) suffix_sum_[i] = suffix_sum_[i + 1] + sorted_[i];
    dirty_ = false;
  }

  size_t capacity_;
  size_t min_samples_;
  size_t next_ = 0;
  std::vector<int32_t> ring_;
  // Derived, rebuilt lazily after a change (at most once per load report).
  mutable bool dirty_ = false;
  mutable std::vector<int32_t> sorted_;
  mutable std::vector<int64_t> suffix_sum_;
};

}  // namespace exa::engine
