#include "router/wait_model.h"

#include <algorithm>
#include <cmath>

namespace exa::router {

WaitModel::WaitModel(double memory) : decay_(std::exp(-1.0 / std::max(1.0, memory))) {}

void WaitModel::Observe(int64_t tokens, double seconds) {
  if (tokens < 0 || !(seconds >= 0) || !std::isfinite(seconds)) return;
  const double x = static_cast<double>(tokens);
  w_ = w_ * decay_ + 1;
  sx_ = sx_ * decay_ + x;
  sy_ = sy_ * decay_ + seconds;
  sxx_ = sxx_ * decay_ + x * x;
  sxy_ = sxy_ * decay_ + x * seconds;
  ++observations_;
}

double WaitModel::slope() const {
  if (w_ <= 0) return 0;
  const double var = sxx_ / w_ - (sx_ / w_) * (sx_ / w_);
  // Every observation with the same token count: no slope to fit, the mean is the estimate.
  if (var <= 1e-9 * std::max(1.0, sxx_ / w_)) return 0;
  const double cov = sxy_ / w_ - (sx_ / w_) * (sy_ / w_);
  return std::max(0.0, cov / var);  // more work ahead never means a shorter wait
}

double WaitModel::intercept() const {
  if (w_ <= 0) return 0;
  return std::max(0.0, sy_ / w_ - slope() * (sx_ / w_));
}

double WaitModel::Predict(int64_t tokens) const {
  if (!ready()) return 0;
  return intercept() + slope() * static_cast<double>(std::max<int64_t>(0, tokens));
}

}  // namespace exa::router
