#include "membership/suspicion.h"

#include <algorithm>
#include <cmath>

namespace exa::membership {

Suspicion::Suspicion(std::string from, int k, absl::Duration min, absl::Duration max,
                     absl::Time start)
    : k_(k), min_(min), max_(std::max(min, max)), start_(start) {
  confirmed_.push_back(std::move(from));
  Recompute();
}

bool Suspicion::Confirm(const std::string& from) {
  if (confirmations() >= k_) return false;
  if (std::find(confirmed_.begin(), confirmed_.end(), from) != confirmed_.end()) return false;
  confirmed_.push_back(from);
  Recompute();
  return true;
}

void Suspicion::Recompute() {
  if (k_ < 1) {
    timeout_ = min_;
    return;
  }
  double frac = std::log(confirmations() + 1.0) / std::log(k_ + 1.0);
  double raw = absl::ToDoubleSeconds(max_) - frac * absl::ToDoubleSeconds(max_ - min_);
  timeout_ = std::max(min_, absl::Milliseconds(std::floor(raw * 1000.0)));
}

absl::Duration SuspicionMinTimeout(int mult, size_t n, absl::Duration probe_interval) {
  double scale = std::log10(std::max<double>(10.0, static_cast<double>(n)));
  return probe_interval * (mult * scale);
}

}  // namespace exa::membership
