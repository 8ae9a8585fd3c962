// Which blocks of a chain a replica names in its cached-block report.
#include "common/prefix_delta.h"

#include <catch2/catch.hpp>
#include <vector>

namespace exa {
namespace {

std::vector<int64_t> Reported(ReportSchedule s, int64_t upto) {
  std::vector<int64_t> out;
  for (int64_t n = 1; n <= upto; ++n) {
    if (s.Reports(n)) out.push_back(n);
  }
  return out;
}

TEST_CASE("report schedule: every unit near the root, then four per doubling, then the cap",
          "[common][prefix]") {
  const ReportSchedule s = ReportSchedule{4, 32}.Normalized();
  // Units of 4 blocks: 1-7 each, then strides of 2 units in [8, 16), 4 in [16, 32), and the
  // cap (8 units = 32 blocks) from 32 on.
  CHECK(Reported(s, 140) ==
        std::vector<int64_t>{4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128});
  for (int64_t n = 128; n <= 4096; ++n) CHECK(s.Reports(n) == (n % 32 == 0));
}

TEST_CASE("report schedule: Next walks exactly the reported positions", "[common][prefix]") {
  for (const ReportSchedule raw : {ReportSchedule{1, 1}, ReportSchedule{4, 64},
                                   ReportSchedule{3, 100}, ReportSchedule{1, 65536}}) {
    const ReportSchedule s = raw.Normalized();
    std::vector<int64_t> walked;
    for (int64_t n = s.Next(0); n <= 20000; n = s.Next(n)) walked.push_back(n);
    CHECK(walked == Reported(s, 20000));
  }
}

TEST_CASE("report schedule: a fixed stride, and normalization", "[common][prefix]") {
  const ReportSchedule fixed = ReportSchedule{4, 4}.Normalized();
  CHECK(Reported(fixed, 20) == std::vector<int64_t>{4, 8, 12, 16, 20});
  // The cap is rounded down to every_blocks times a power of two, and never below every_blocks.
  CHECK(ReportSchedule{3, 100}.Normalized().max_every_blocks == 96);
  CHECK(ReportSchedule{8, 2}.Normalized().max_every_blocks == 8);
  CHECK(ReportSchedule{0, 0}.Normalized() == ReportSchedule{1, 1});
  // The longest gap between reported positions, relative to the depth, is at most a quarter
  // until the cap binds: a long shared prefix is seen to within 25 %.
  const ReportSchedule s = ReportSchedule{1, 1 << 16}.Normalized();
  for (int64_t n = 8; n < 100000; n = s.Next(n)) CHECK(s.Next(n) - n <= n / 4);
}

}  // namespace
}  // namespace exa
