// Leak detection: steady growth that never returns is flagged; noise, a cache that fills and
// drains, and a restart are not.
#include <catch2/catch.hpp>

#include "scheduler/leak_detector.h"

namespace exa::scheduler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);
constexpr uint64_t kGi = uint64_t{1} << 30;

TEST_CASE("Growth that keeps rising is flagged; noise and a filling-draining cache are not") {
  LeakDetector d;
  for (int h = 0; h <= 8; ++h) {
    const absl::Time t = kT0 + absl::Hours(h);
    d.Observe("leaky", 1, t, 10 * kGi + h * kGi / 2);              // +5 % of the baseline an hour
    d.Observe("noisy", 1, t, 10 * kGi + (h % 2 ? kGi / 200 : 0));  // ±0.5 %
    d.Observe("cache", 1, t, 10 * kGi + (h % 4 < 2 ? h % 4 : 0) * kGi);  // fills, drains
  }
  CHECK(d.FlaggedIds() == std::vector<std::string>{"leaky"});
  CHECK(d.Growth("leaky") == Approx(0.4));
}

TEST_CASE("Samples closer than the interval are ignored; a restart resets the baseline") {
  LeakDetector d;
  // Rising every 10 minutes, but only hourly samples count: four rises need four hours.
  for (int m = 0; m < 240; m += 10)
    d.Observe("r", 1, kT0 + absl::Minutes(m), 10 * kGi + m * kGi / 60);
  CHECK_FALSE(d.Flagged("r", 1));
  d.Observe("r", 1, kT0 + absl::Minutes(240), 14 * kGi);
  CHECK(d.Flagged("r", 1));
  LeakDetector e;
  for (int h = 0; h <= 5; ++h) e.Observe("r", 1, kT0 + absl::Hours(h), 10 * kGi + h * kGi);
  CHECK(e.Flagged("r", 1));
  CHECK_FALSE(e.Flagged("r", 2));  // a successor not yet observed has no flag of its own
  e.Observe("r", 2, kT0 + absl::Hours(6), 10 * kGi);  // restarted: a new baseline
  CHECK_FALSE(e.Flagged("r", 1));
  CHECK_FALSE(e.Flagged("r", 2));
  e.Forget("r");
  CHECK(e.FlaggedIds().empty());
}

TEST_CASE("A node's replicas it no longer reports are forgotten, other nodes' kept") {
  LeakDetector d;
  for (const char* id : {"n1/a", "n1/b", "n10/a", "n2/a"}) d.Observe(id, 1, kT0, kGi);
  d.ForgetMissing("n1/", {"n1/b"});
  // n1/a is gone; n10/a shares the text "n1" but not the prefix "n1/".
  d.Observe("n1/a", 1, kT0 + absl::Hours(1), 2 * kGi);  // a new baseline, not a rise
  CHECK(d.Growth("n1/a") == Approx(0));
  for (const char* id : {"n1/b", "n10/a", "n2/a"}) {
    d.Observe(id, 1, kT0 + absl::Hours(1), 2 * kGi);
    CHECK(d.Growth(id) == Approx(1.0));
  }
}

}  // namespace
}  // namespace exa::scheduler
