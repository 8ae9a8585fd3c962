// Seeded randomness replays exactly, which every simulation relies on.
#include "common/random.h"

#include <vector>

#include <catch2/catch.hpp>

namespace exa {
namespace {

TEST_CASE("Same seed gives the same stream; different seeds differ", "[random]") {
  Random a(42), b(42), c(43);
  std::vector<uint64_t> xs, ys, zs;
  for (int i = 0; i < 16; ++i) {
    xs.push_back(a.Uniform(1000));
    ys.push_back(b.Uniform(1000));
    zs.push_back(c.Uniform(1000));
  }
  CHECK(xs == ys);
  CHECK(xs != zs);
}

TEST_CASE("Shuffle is a permutation and deterministic", "[random]") {
  std::vector<int> v1{1, 2, 3, 4, 5, 6, 7, 8}, v2 = v1;
  Random a(7), b(7);
  a.Shuffle(v1);
  b.Shuffle(v2);
  CHECK(v1 == v2);
  std::vector<int> sorted = v1;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8});
}

}  // namespace
}  // namespace exa
