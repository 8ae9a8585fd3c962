// Proves the decode estimate the router reads comes from observed output lengths, not from
// max_tokens: the mean residual length E[L - g | L > g] of the window, capped, with the cap as the
// answer until enough requests finished, and old lengths ageing out of the bounded window.
#include <catch2/catch.hpp>

#include "engine/output_length_history.h"

namespace exa::engine {
namespace {

TEST_CASE("output history: the cap until min_samples lengths are seen", "[engine][estimate]") {
  OutputLengthHistory h(/*capacity=*/8, /*min_samples=*/3);
  CHECK_FALSE(h.ready());
  CHECK(h.ExpectedRemaining(0, 2048) == 2048);
  h.Add(10);
  h.Add(20);
  CHECK(h.ExpectedRemaining(0, 2048) == 2048);
  h.Add(30);
  CHECK(h.ready());
  CHECK(h.ExpectedRemaining(0, 2048) == 20);  // mean of 10, 20, 30
  CHECK(h.Mean() == Approx(20.0));
  CHECK(h.ExpectedRemaining(0, 0) == 0);  // nothing may come
}

TEST_CASE("output history: mean residual length of the requests still alive at g",
          "[engine][estimate]") {
  OutputLengthHistory h(16, 1);
  for (int32_t l : {10, 20, 30, 100}) h.Add(l);
  // At g = 15 only 20, 30 and 100 were longer: (5 + 15 + 85) / 3 = 35.
  CHECK(h.ExpectedRemaining(15, 4096) == 35);
  // At g = 20 (20 itself is over): (10 + 80) / 2 = 45.
  CHECK(h.ExpectedRemaining(20, 4096) == 45);
  CHECK(h.ExpectedRemaining(99, 4096) == 1);
  // Capped by what the sequence may still produce.
  CHECK(h.ExpectedRemaining(15, 7) == 7);
  // Past every observed length: as much again as it has generated, capped.
  CHECK(h.ExpectedRemaining(150, 4096) == 150);
  CHECK(h.ExpectedRemaining(150, 40) == 40);
}

TEST_CASE("output history: a bounded window, old lengths age out", "[engine][estimate]") {
  OutputLengthHistory h(4, 1);
  for (int i = 0; i < 4; ++i) h.Add(1000);
  CHECK(h.ExpectedRemaining(0, 4096) == 1000);
  for (int i = 0; i < 4; ++i) h.Add(10);
  CHECK(h.size() == 4);
  CHECK(h.ExpectedRemaining(0, 4096) == 10);
}

}  // namespace
}  // namespace exa::engine
