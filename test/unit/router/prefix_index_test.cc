// Proves that a gateway's prefix index follows a replica's cached-block journal: after 10 000
// random store/evict events, with messages lost on the way (the stream breaks and the gateway
// reconnects), journals too short to cover a slow reader, cache resets and replica restarts, the
// index holds exactly the replica's set; and a delta that does not follow never leaves hashes
// the replica may have evicted.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/prefix_journal.h"
#include "router/prefix_index.h"

namespace exa::router {
namespace {

Hash128 H(uint64_t n) { return {n * 0x9E3779B97F4A7C15ULL, n}; }

TEST_CASE("prefix index: matches the replica's set after 10 000 events with losses and resyncs",
          "[router][prefix]") {
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    uint64_t epoch = 1;
    auto journal = std::make_unique<engine::PrefixJournal>(epoch, ReportSchedule{}, "m@v1/sim",
                                                           /*capacity=*/256);
    std::vector<Hash128> truth;  // the replica's set
    PrefixIndex index(/*max_hashes_per_replica=*/4096);
    // The node's cursor for this gateway's stream: what it believes it sent. A new stream
    // starts from nothing, which the journal answers with a snapshot.
    uint64_t sent_epoch = 0, sent_cursor = 0;
    int snapshots = 0, stale = 0, lost = 0;
    auto send = [&](bool may_lose) {
      engine::PrefixCacheDelta d = journal->Since(sent_epoch, sent_cursor, 64);
      if (d.empty()) return;
      sent_epoch = d.epoch;
      sent_cursor = d.to;
      snapshots += d.snapshot ? 1 : 0;
      if (may_lose && rng() % 40 == 0) {
        ++lost;  // lost in flight; the next delta will not follow
        return;
      }
      if (index.Apply("r", d) == PrefixIndex::Applied::kStale) {
        ++stale;
        sent_epoch = sent_cursor = 0;  // the gateway reconnects: a new stream
      }
    };
    uint64_t next = 1;
    for (int event = 0; event < 10000; ++event) {
      const uint64_t r = rng() % 100;
      if (r < 55 || truth.empty()) {
        const Hash128 h = H(next++);
        truth.push_back(h);
        const CacheEvent e{true, h};
        journal->Append({&e, 1});
      } else {
        const size_t i = rng() % truth.size();
        const CacheEvent e{false, truth[i]};
        truth[i] = truth.back();
        truth.pop_back();
        journal->Append({&e, 1});
      }
      if (rng() % 1000 == 0) journal->Reset(truth);  // the cache dropped events
      if (rng() % 3000 == 0) {                       // the replica restarted: a new journal
        journal =
            std::make_unique<engine::PrefixJournal>(++epoch, ReportSchedule{}, "m@v1/sim", 256);
        truth.clear();
      }
      if (rng() % (1 + rng() % 20) == 0) send(/*may_lose=*/true);
    }
    for (int i = 0; i < 100 && !index.Holds("r", truth); ++i) send(/*may_lose=*/false);
    CHECK(index.Holds("r", truth));
    CHECK(index.State("r").cursor == journal->last_seq());
    CHECK(lost > 0);
    CHECK(stale > 0);
    CHECK(snapshots > 1);
  }
}

TEST_CASE("prefix index: counts leading blocks only, and a stale replica matches nothing",
          "[router][prefix]") {
  PrefixIndex index;
  PrefixCacheDelta snap{.epoch = 7, .snapshot = true, .from = 0, .to = 3};
  snap.events = {{true, H(1)}, {true, H(2)}, {true, H(4)}};
  REQUIRE(index.Apply("r", snap) == PrefixIndex::Applied::kApplied);
  const std::vector<Hash128> want = {H(1), H(2), H(3), H(4)};
  CHECK(index.MatchedBlocks("r", want) == 2);  // H(4) is held but follows a miss
  CHECK(index.MatchedBlocks("other", want) == 0);
  PrefixCacheDelta gap{.epoch = 7, .snapshot = false, .from = 5, .to = 6};
  gap.events = {{false, H(9)}};
  CHECK(index.Apply("r", gap) == PrefixIndex::Applied::kStale);
  CHECK(index.MatchedBlocks("r", want) == 0);
  PrefixCacheDelta next{.epoch = 7, .snapshot = false, .from = 3, .to = 4};
  CHECK(index.Apply("r", next) == PrefixIndex::Applied::kStale);  // stale until a snapshot
  CHECK(index.Apply("r", snap) == PrefixIndex::Applied::kApplied);
  CHECK(index.MatchedBlocks("r", want) == 2);
}

TEST_CASE("prefix index: a replica reporting every 4th block matches to within 4 blocks",
          "[router][prefix]") {
  PrefixIndex index;
  PrefixCacheDelta snap{.epoch = 1, .snapshot = true, .from = 0, .to = 2};
  snap.report = {.every_blocks = 4, .max_every_blocks = 4};
  snap.events = {{true, H(4)}, {true, H(8)}};  // blocks 3 and 7 of the chain H(1)..H(10)
  REQUIRE(index.Apply("r", snap) == PrefixIndex::Applied::kApplied);
  std::vector<Hash128> chain;
  for (uint64_t i = 1; i <= 10; ++i) chain.push_back(H(i));
  CHECK(index.MatchedBlocks("r", chain) == 8);
  chain[7] = H(99);  // the chain differs from block 7 on
  CHECK(index.MatchedBlocks("r", chain) == 4);
  chain.resize(3);  // shorter than one reported stride
  CHECK(index.MatchedBlocks("r", chain) == 0);
}

TEST_CASE("prefix index: a schedule that widens with depth matches at the reported positions",
          "[router][prefix]") {
  PrefixIndex index;
  PrefixCacheDelta snap{.epoch = 1, .snapshot = true, .from = 0};
  snap.report = {.every_blocks = 1, .max_every_blocks = 4};
  // Reported positions: 1-7, 8, 10, ..., 16, then every 4th: 20, 24, ...
  for (uint64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24}) {
    snap.events.push_back({true, H(n)});
  }
  snap.to = snap.events.size();
  REQUIRE(index.Apply("r", snap) == PrefixIndex::Applied::kApplied);
  std::vector<Hash128> chain;
  for (uint64_t i = 1; i <= 30; ++i) chain.push_back(H(i));
  CHECK(index.MatchedBlocks("r", chain) == 24);
  // The chain differs from position 19 on (a chained hash changes every later one): 16 is the
  // last reported position that matches.
  for (size_t i = 18; i < chain.size(); ++i) chain[i] = H(100 + i);
  CHECK(index.MatchedBlocks("r", chain) == 16);
  chain.resize(9);
  CHECK(index.MatchedBlocks("r", chain) == 8);
}

// A chain of `length` blocks: the first `shared` follow a common trunk, the rest are `branch`'s.
std::vector<Hash128> Chain(uint64_t ns, int length, int shared, uint64_t branch) {
  std::vector<Hash128> chain;
  for (int i = 0; i < length; ++i) {
    chain.push_back(i < shared ? H(ns * 1000000 + static_cast<uint64_t>(i) + 1)
                               : H(ns * 1000000 + branch * 1000 + static_cast<uint64_t>(i) + 1));
  }
  return chain;
}

TEST_CASE("prefix index: Matches finds exactly the replicas MatchedBlocks credits",
          "[router][prefix]") {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    PrefixIndex index;
    const ReportSchedule schedules[] = {{4, 64}, {1, 1}};
    const std::string namespaces[] = {"m@v1/cpu", "m@v2/cpu"};
    std::vector<std::string> ids;
    for (int r = 0; r < 24; ++r) {
      ids.push_back("r" + std::to_string(r));
      const int ns = r % 2;
      PrefixCacheDelta snap{.epoch = 1, .snapshot = true, .from = 0, .to = 0};
      snap.report = schedules[r % 3 == 0 ? 1 : 0];
      snap.cache_namespace = namespaces[ns];
      // Each replica caches a random prefix of a random branch, then evicts some blocks.
      const std::vector<Hash128> chain =
          Chain(static_cast<uint64_t>(ns), 300, static_cast<int>(rng() % 200),
                static_cast<uint64_t>(rng() % 3));
      const size_t held = rng() % chain.size();
      for (size_t i = 0; i < held; ++i) {
        if (rng() % 20 != 0) snap.events.push_back({true, chain[i]});
      }
      REQUIRE(index.Apply(ids.back(), snap) == PrefixIndex::Applied::kApplied);
    }
    index.Remove("r5");  // a removed replica's holdings go with it, and its slot is reused
    PrefixCacheDelta none{.epoch = 1, .snapshot = true, .from = 0, .to = 0};
    none.cache_namespace = namespaces[1];
    index.Apply("late", none);
    ids[5] = "late";
    for (int q = 0; q < 30; ++q) {
      const std::vector<std::vector<Hash128>> requests = {
          Chain(0, 1 + static_cast<int>(rng() % 300), static_cast<int>(rng() % 200),
                static_cast<uint64_t>(rng() % 3)),
          Chain(1, 1 + static_cast<int>(rng() % 300), static_cast<int>(rng() % 200),
                static_cast<uint64_t>(rng() % 3))};
      std::map<std::string, int32_t> found;
      size_t deepest = 0;
      for (const PrefixIndex::Match& m : index.Matches([&](const std::string&ns, size_t blocks) {
             deepest = std::max(deepest, blocks);
             const auto& chain = requests[ns == namespaces[0] ? 0 : 1];
             return std::span<const Hash128>(chain).first(std::min(blocks, chain.size()));
           })) {
        CHECK(found.emplace(m.replica, m.blocks).second);
      }
      // Hashed in rounds that double: never more than twice what a walk needed (or 8 blocks).
      int32_t most = 0;
      for (const auto& [id, blocks] : found) most = std::max(most, blocks);
      CHECK(deepest <= std::max<size_t>(8, 2 * (static_cast<size_t>(most) + 64)));
      for (int r = 0; r < 24; ++r) {
        const int32_t want = index.MatchedBlocks(ids[r], requests[r % 2]);
        INFO("replica " << ids[r]);
        if (want == 0) {
          CHECK(found.count(ids[r]) == 0);
        } else {
          CHECK(found[ids[r]] == want);
        }
      }
    }
  }
}

TEST_CASE("prefix index: a replica's index stops growing at its bound", "[router][prefix]") {
  PrefixIndex index(/*max_hashes_per_replica=*/2);
  PrefixCacheDelta d{.epoch = 1, .snapshot = true, .from = 0, .to = 3};
  d.events = {{true, H(1)}, {true, H(2)}, {true, H(3)}};
  index.Apply("r", d);
  CHECK(index.State("r").hashes == 2);
  CHECK(index.State("r").dropped == 1);
}

}  // namespace
}  // namespace exa::router
