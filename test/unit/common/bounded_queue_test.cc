// The bounded queue rejects at capacity instead of growing, and Close() releases waiters.
#include "common/bounded_queue.h"

#include <thread>

#include <catch2/catch.hpp>

namespace exa {
namespace {

TEST_CASE("A full queue rejects immediately and accepts again after a pop", "[queue]") {
  BoundedQueue<int> q(2);
  CHECK(q.TryPush(1) == PushResult::kOk);
  CHECK(q.TryPush(2) == PushResult::kOk);
  CHECK(q.TryPush(3) == PushResult::kFull);
  CHECK(q.size() == 2);
  CHECK(*q.TryPop() == 1);
  CHECK(q.TryPush(3) == PushResult::kOk);
  CHECK(*q.TryPop() == 2);
  CHECK(*q.TryPop() == 3);
  CHECK_FALSE(q.TryPop().has_value());
}

TEST_CASE("Close wakes a blocked consumer and refuses new items", "[queue]") {
  BoundedQueue<int> q(4);
  std::optional<int> got = 7;
  std::thread consumer([&] { got = q.PopWithTimeout(absl::Seconds(30)); });
  q.Close();
  consumer.join();
  CHECK_FALSE(got.has_value());
  CHECK(q.TryPush(1) == PushResult::kClosed);
}

TEST_CASE("Items pushed before Close are still drained", "[queue]") {
  BoundedQueue<std::string> q(4);
  REQUIRE(q.TryPush("a") == PushResult::kOk);
  q.Close();
  CHECK(*q.PopWithTimeout(absl::Seconds(1)) == "a");
  CHECK_FALSE(q.PopWithTimeout(absl::Milliseconds(1)).has_value());
}

TEST_CASE("Many producers never exceed capacity", "[queue]") {
  BoundedQueue<int> q(100);
  std::atomic<int> accepted{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < 4; ++t) {
    producers.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (q.TryPush(i) == PushResult::kOk) accepted++;
      }
    });
  }
  for (auto& t : producers) t.join();
  CHECK(accepted.load() == 100);
  CHECK(q.size() == 100);
}

}  // namespace
}  // namespace exa
