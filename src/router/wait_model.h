// How long a routed request waits for its first token, from the work the router saw ahead of
// it (docs/architecture.md#routing): a line fitted online, seconds = a + b x tokens, where the
// tokens are the chosen replica's queue at the decision plus the request's uncached prefill.
// Each gateway fits its own from the first tokens it sees, forgetting old ones, so the
// estimate follows the hardware and the load without a configured rate. The gateway reports
// actual ÷ estimated time to first token: how well the router's view predicts the wait.
//
// Thread safety: none; the owner locks. Pure arithmetic, no clock.
#pragma once

#include <cstdint>

namespace exa::router {

class WaitModel {
 public:
  // `memory`: observations weigh exp(-1/memory) less each time a new one arrives.
  explicit WaitModel(double memory = 512);

  void Observe(int64_t tokens, double seconds);
  // Seconds to the first token for `tokens` ahead; 0 until `min_observations` were seen (the
  // fit is not yet worth reporting against).
  double Predict(int64_t tokens) const;
  bool ready() const { return observations_ >= kMinObservations; }
  double intercept() const;  // a, seconds
  double slope() const;      // b, seconds per token

  static constexpr int64_t kMinObservations = 32;

 private:
  double decay_;
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;  // weighted sums
  int64_t observations_ = 0;
};

}  // namespace exa::router
