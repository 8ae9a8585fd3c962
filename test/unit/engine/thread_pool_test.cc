// ParallelFor covers [0, n) exactly once per call, across many calls in a row on a pool with
// worker threads (spinning between jobs or blocking at once), and a pool of one runs inline.
#include <atomic>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/cpu/thread_pool.h"

namespace exa::engine::cpu {
namespace {

TEST_CASE("ParallelFor covers every index once, call after call", "[engine]") {
  ThreadPool pool(4);
  REQUIRE(pool.size() == 4);
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 4099}) {
    for (int round = 0; round < 50; ++round) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> empty_chunks{0};  // Catch2 assertions are not for worker threads
      pool.ParallelFor(n, [&](int64_t begin, int64_t end) {
        if (begin >= end) empty_chunks++;
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
      });
      int64_t wrong = 0;
      for (auto& h : hits) wrong += h.load() != 1;
      INFO("n " << n << " round " << round);
      CHECK(wrong == 0);
      CHECK(empty_chunks.load() == 0);
    }
  }
}

TEST_CASE("Workers that block between jobs still take every job", "[engine]") {
  ThreadPool pool(2, absl::ZeroDuration());  // no spinning: each job wakes a blocked worker
  for (int round = 0; round < 500; ++round) {
    std::vector<std::atomic<int>> hits(64);
    pool.ParallelFor(64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
    });
    int64_t wrong = 0;
    for (auto& h : hits) wrong += h.load() != 1;
    INFO("round " << round);
    REQUIRE(wrong == 0);
  }
}

TEST_CASE("ParallelFor splits into at most the chunks asked for", "[engine]") {
  ThreadPool pool(3);
  std::atomic<int> calls{0};
  pool.ParallelFor(
      100, [&](int64_t, int64_t) { calls++; }, 2);
  CHECK(calls.load() == 2);
}

TEST_CASE("A pool of one runs on the caller's thread", "[engine]") {
  ThreadPool pool(1);
  const std::thread::id caller = std::this_thread::get_id();
  bool inline_run = false;
  pool.ParallelFor(10, [&](int64_t begin, int64_t end) {
    inline_run = std::this_thread::get_id() == caller && begin == 0 && end == 10;
  });
  CHECK(inline_run);
}

}  // namespace
}  // namespace exa::engine::cpu
