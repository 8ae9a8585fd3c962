// Lifeguard's pieces behave as specified: the suspicion timeout starts at max and shrinks with
// independent confirmations to min = mult * log10(max(N, 10)) * interval; the broadcast queue
// sends alive first, retires an update after its retransmit limit and respects the payload.
#include <catch2/catch.hpp>

#include "membership/awareness.h"
#include "membership/broadcast_queue.h"
#include "membership/suspicion.h"

namespace exa::membership {
namespace {

TEST_CASE("Suspicion min follows the Lifeguard formula", "[membership][lifeguard]") {
  CHECK(SuspicionMinTimeout(4, 3, absl::Seconds(1)) == absl::Seconds(4));  // max(N, 10)
  absl::Duration at_256 = SuspicionMinTimeout(4, 256, absl::Seconds(1));
  CHECK(absl::ToDoubleSeconds(at_256) == Approx(4 * std::log10(256.0)).epsilon(1e-6));
}

TEST_CASE("Suspicion timeout shrinks from max to min with confirmations",
          "[membership][lifeguard]") {
  absl::Time t0 = absl::UnixEpoch();
  Suspicion s("origin", 3, absl::Seconds(10), absl::Seconds(60), t0);
  CHECK(s.deadline() == t0 + absl::Seconds(60));
  CHECK_FALSE(s.Confirm("origin"));  // the origin is not independent
  CHECK(s.Confirm("b"));
  absl::Time after_one = s.deadline();
  CHECK(after_one < t0 + absl::Seconds(60));
  CHECK_FALSE(s.Confirm("b"));  // duplicates do not count
  CHECK(s.deadline() == after_one);
  CHECK(s.Confirm("c"));
  CHECK(s.Confirm("d"));
  CHECK(s.deadline() == t0 + absl::Seconds(10));
  CHECK_FALSE(s.Confirm("e"));  // past k
  Suspicion small("origin", 0, absl::Seconds(10), absl::Seconds(60), t0);
  CHECK(small.deadline() == t0 + absl::Seconds(10));
}

TEST_CASE("Awareness scales timeouts by score + 1 within [0, max]", "[membership][lifeguard]") {
  Awareness a(8);
  a.ApplyDelta(-3);
  CHECK(a.score() == 0);
  a.ApplyDelta(20);
  CHECK(a.score() == 8);
  CHECK(a.Scale(absl::Seconds(1)) == absl::Seconds(9));
}

TEST_CASE("Broadcast queue: alive first, replacement, retransmit limit, payload bound",
          "[membership][broadcast]") {
  BroadcastQueue q(100);
  q.Queue("a", std::string(10, 's'), /*alive=*/false);
  q.Queue("b", std::string(10, 'A'), /*alive=*/true);
  auto first = q.Take(2, 1000, 3);
  REQUIRE(first.size() == 2);
  CHECK(first[0][0] == 'A');
  q.Queue("a", std::string(10, 'n'), false);  // replaces the old message about a
  CHECK(q.size() == 2);
  q.Take(2, 1000, 3);
  q.Take(2, 1000, 3);
  // "b" reached 3 transmits; "a" was re-queued, so it has one left.
  auto last = q.Take(2, 1000, 3);
  REQUIRE(last.size() == 1);
  CHECK(last[0][0] == 'n');
  CHECK(q.size() == 0);
  for (int i = 0; i < 50; ++i) q.Queue("n" + std::to_string(i), std::string(100, 'x'), false);
  auto some = q.Take(2, 500, 10);
  CHECK(some.size() == 4);  // 4 * 102 <= 500 < 5 * 102
  CHECK(RetransmitLimit(4, 256) == 12);
  CHECK(RetransmitLimit(4, 9) == 4);
}

}  // namespace
}  // namespace exa::membership
