// Proves that a gateway's prefix index follows a replica's cached-block journal: after 10 000
// random store/evict events, with messages lost on the way (the stream breaks and the gateway
// reconnects), journals too short to cover a slow reader, cache resets and replica restarts, the
// index holds exactly the replica's set; and a delta that does not follow never leaves hashes
// the replica may have evicted.
#include <catch2/catch.hpp>

#include <memory>
#include <random>
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
    auto journal = std::make_unique<engine::PrefixJournal>(epoch, 1, "m@v1/sim", /*capacity=*/256);
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
        journal = std::make_unique<engine::PrefixJournal>(++epoch, 1, "m@v1/sim", 256);
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
  snap.report_every_blocks = 4;
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
