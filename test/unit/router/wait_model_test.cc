// The router's wait model: an online line through (tokens ahead, seconds to first token).
#include "router/wait_model.h"

#include <catch2/catch.hpp>

#include "common/random.h"

namespace exa::router {
namespace {

TEST_CASE("The wait model recovers a line from noisy observations", "[router]") {
  WaitModel model;
  Random random(7);
  CHECK(model.Predict(1000) == 0);  // nothing seen yet
  for (int i = 0; i < 2000; ++i) {
    const int64_t tokens = static_cast<int64_t>(random.Uniform(20000));
    const double noise = (random.UniformDouble() - 0.5) * 0.02;
    model.Observe(tokens, 0.05 + 2e-4 * static_cast<double>(tokens) + noise);
  }
  REQUIRE(model.ready());
  CHECK(model.slope() == Approx(2e-4).epsilon(0.05));
  CHECK(model.intercept() == Approx(0.05).margin(0.01));
  CHECK(model.Predict(10000) == Approx(2.05).epsilon(0.05));
}

TEST_CASE("The wait model follows a change and ignores nonsense", "[router]") {
  WaitModel model(/*memory=*/64);
  for (int i = 0; i < 500; ++i) model.Observe(i % 100 * 100, 1e-4 * (i % 100 * 100));
  for (int i = 0; i < 500; ++i) model.Observe(i % 100 * 100, 4e-4 * (i % 100 * 100));
  CHECK(model.slope() == Approx(4e-4).epsilon(0.05));
  const double before = model.Predict(5000);
  model.Observe(-5, 1.0);
  model.Observe(100, -1.0);
  model.Observe(100, std::numeric_limits<double>::quiet_NaN());
  CHECK(model.Predict(5000) == before);
}

TEST_CASE("Equal token counts give the mean wait, never a negative slope", "[router]") {
  WaitModel model;
  for (int i = 0; i < 100; ++i) model.Observe(500, i % 2 == 0 ? 0.1 : 0.3);
  CHECK(model.slope() == 0);
  CHECK(model.Predict(500) == Approx(0.2).epsilon(0.01));
  WaitModel falling;
  for (int i = 0; i < 100; ++i) falling.Observe(i * 10, 1.0 - i * 0.001);
  CHECK(falling.slope() == 0);
}

}  // namespace
}  // namespace exa::router
