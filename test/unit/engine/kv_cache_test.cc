// Proves the paged KV cache's prefix caching under random use: reference counts, the LRU list and
// the hash index stay consistent through admissions, growth, publishes, preemptions, cancellations
// and evictions; a block taken from the cache always holds exactly the tokens the taker expects
// (no request sees another's K and V); and the event stream, replayed, gives the cache's own set.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "engine/kv_cache.h"
#include "engine/prefix_hash.h"

namespace exa::engine {
namespace {

constexpr int32_t kBlock = 4;

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
  std::vector<BlockHash> hashes;
  int32_t computed = 0;
  int32_t published = 0;
};

// A model of the engine's use of the cache: blocks "hold" the tokens written to them, checked
// whenever a sequence reads a block it took from the cache.
class Harness {
 public:
  Harness(int32_t blocks, double cached_fraction, uint32_t seed, int32_t report_every = 1)
      : cache_(blocks, kBlock, {true, cached_fraction, report_every}),
        content_(static_cast<size_t>(blocks)),
        rng_(seed) {
    root_ = hasher_.Root("model@v1", "");
    // A few shared prefixes, so admissions hit.
    for (int p = 0; p < 4; ++p) {
      std::vector<int32_t> prefix(static_cast<size_t>(kBlock * (1 + rng_() % 6)));
      for (auto& t : prefix) t = static_cast<int32_t>(rng_() % 5);
      prefixes_.push_back(prefix);
    }
  }

  void Admit() {
    Seq s;
    s.tokens = prefixes_[rng_() % prefixes_.size()];
    const int extra = static_cast<int>(rng_() % 9);
    for (int i = 0; i < extra; ++i) s.tokens.push_back(static_cast<int32_t>(rng_() % 5));
    if (s.tokens.empty()) s.tokens.push_back(1);
    waiting_.push_back(std::move(s));
  }

  // Admits the oldest waiting sequence if its blocks fit (prefix first), as the scheduler does.
  void Schedule() {
    if (waiting_.empty()) return;
    Seq& s = waiting_.front();
    const int32_t max_blocks = (static_cast<int32_t>(s.tokens.size()) - 1) / kBlock;
    hasher_.Extend(root_, s.tokens, kBlock, max_blocks, &s.hashes);
    const int32_t taken = cache_.AcquirePrefix(s.hashes, max_blocks, s.tokens, &s.table);
    for (int32_t i = 0; i < taken; ++i) VerifyBlock(s, i);
    s.computed = taken * kBlock;
    s.published = taken;
    if (!cache_.Grow(&s.table, static_cast<int32_t>(s.tokens.size()))) {
      cache_.Free(&s.table);
      s.computed = s.published = 0;
      return;
    }
    hits_ += taken;
    Compute(s, static_cast<int32_t>(s.tokens.size()));
    running_.push_back(std::move(s));
    waiting_.erase(waiting_.begin());
  }

  // One decode token for a random running sequence; preempts it when no block is free.
  void Decode() {
    if (running_.empty()) return;
    const size_t i = rng_() % running_.size();
    Seq& s = running_[i];
    s.tokens.push_back(static_cast<int32_t>(rng_() % 5));
    if (!cache_.Grow(&s.table, static_cast<int32_t>(s.tokens.size()))) {
      s.tokens.pop_back();
      Preempt(i);
      return;
    }
    Compute(s, static_cast<int32_t>(s.tokens.size()));
  }

  void Preempt(size_t i) {
    Seq s = std::move(running_[i]);
    running_.erase(running_.begin() + static_cast<int64_t>(i));
    cache_.Free(&s.table);
    s.computed = s.published = 0;
    waiting_.insert(waiting_.begin(), std::move(s));
  }

  void Finish() {
    if (running_.empty()) return;
    const size_t i = rng_() % running_.size();
    cache_.Free(&running_[i].table);
    running_.erase(running_.begin() + static_cast<int64_t>(i));
  }

  // One of the four operations, chosen by `draw`.
  void RandomOp(uint32_t draw) {
    switch (draw % 4) {
      case 0:
        Admit();
        break;
      case 1:
        Schedule();
        break;
      case 2:
        Decode();
        break;
      default:
        Finish();
        break;
    }
  }

  void CheckInvariants() {
    std::vector<std::vector<int32_t>> tables;
    for (const Seq& s : running_) tables.push_back(s.table);
    for (const Seq& s : waiting_) REQUIRE(s.table.empty());
    const std::string broken = cache_.CheckInvariants(tables);
    INFO(broken);
    REQUIRE(broken.empty());
  }

  // Replays the events since the last call into `index` (a gateway's view of this cache).
  void ApplyEvents(absl::flat_hash_set<BlockHash>& index) {
    if (cache_.events_lost()) {
      index.clear();
      for (const BlockHash& h : cache_.Snapshot()) index.insert(h);
      return;
    }
    for (const CacheEvent& e : cache_.TakeEvents()) {
      if (e.stored) {
        REQUIRE(index.insert(e.hash).second);
      } else {
        REQUIRE(index.erase(e.hash) == 1);
      }
    }
  }
  std::vector<BlockHash> Snapshot() { return cache_.Snapshot(); }
  int64_t hits() const { return hits_; }
  uint64_t evictions() const { return cache_.evictions(); }

 private:
  // The sequence's K and V for tokens [computed, upto) are written: each block it owns holds the
  // tokens of its span; full blocks are published.
  void Compute(Seq& s, int32_t upto) {
    for (int32_t p = s.computed; p < upto; ++p) {
      auto& c = content_[s.table[p / kBlock]];
      if (p % kBlock == 0) c.clear();
      c.push_back(s.tokens[p]);
    }
    s.computed = upto;
    const int32_t full = upto / kBlock;
    hasher_.Extend(root_, s.tokens, kBlock, full, &s.hashes);
    cache_.Publish(s.table, std::span<const BlockHash>(s.hashes).first(full), s.published,
                   s.tokens);
    s.published = full;
  }

  void VerifyBlock(const Seq& s, int32_t i) {
    const auto& c = content_[s.table[i]];
    const std::vector<int32_t> want(s.tokens.begin() + i * kBlock,
                                    s.tokens.begin() + (i + 1) * kBlock);
    REQUIRE(c == want);
  }

  KvCache cache_;
  PrefixHasher hasher_;
  BlockHash root_;
  std::vector<std::vector<int32_t>> content_;
  std::vector<std::vector<int32_t>> prefixes_;
  std::vector<Seq> running_, waiting_;
  std::mt19937 rng_;
  int64_t hits_ = 0;
};

TEST_CASE(
    "prefix cache: random admissions, decodes, preemptions and finishes keep every "
    "invariant",
    "[engine][prefix]") {
  for (uint32_t seed = 1; seed <= 24; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(seed * 7919);
    const double fraction = seed % 3 == 0 ? 0.25 : 1.0;
    Harness h(24 + static_cast<int32_t>(seed % 16), fraction, seed);
    for (int op = 0; op < 3000; ++op) {
      h.RandomOp(static_cast<uint32_t>(rng()));
      h.CheckInvariants();
    }
    CHECK(h.hits() > 0);
    CHECK(h.evictions() > 0);
  }
}

TEST_CASE(
    "prefix cache: an index fed the event stream, with drops and resyncs, matches the "
    "cache after 10 000 events",
    "[engine][prefix]") {
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    Harness h(32, 1.0, seed + 100, /*report_every=*/1 + static_cast<int32_t>(seed % 3));
    absl::flat_hash_set<BlockHash> index;
    for (int op = 0; op < 10000; ++op) {
      h.RandomOp(static_cast<uint32_t>(rng()));
      if (rng() % 50 == 0) h.ApplyEvents(index);
    }
    h.ApplyEvents(index);
    const std::vector<BlockHash> truth = h.Snapshot();
    CHECK(index == absl::flat_hash_set<BlockHash>(truth.begin(), truth.end()));
  }
}

TEST_CASE("prefix hashes chain over the whole prefix and name the namespace and salt",
          "[engine][prefix]") {
  PrefixHasher hasher;
  const BlockHash root = hasher.Root("m@v1", "");
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> b = {9, 2, 3, 4, 5, 6, 7, 8};  // same second block, other first
  std::vector<BlockHash> ha, hb;
  hasher.Extend(root, a, kBlock, 2, &ha);
  hasher.Extend(root, b, kBlock, 2, &hb);
  CHECK(ha[0] != hb[0]);
  CHECK(ha[1] != hb[1]);  // a block's name covers everything before it
  std::vector<BlockHash> again;
  hasher.Extend(root, a, kBlock, 1, &again);
  hasher.Extend(root, a, kBlock, 2, &again);  // extending continues the chain
  CHECK(again == ha);
  CHECK(hasher.Root("m@v1", "tenant-a") != root);
  CHECK(hasher.Root("m@v2", "") != root);
  CHECK(hasher.Root("ab", "c") != hasher.Root("a", "bc"));
  CHECK(root.ToHex().size() == 32);
}

TEST_CASE("prefix cache: a referenced block is never evicted; at the limit Grow fails cleanly",
          "[engine][prefix]") {
  KvCache cache(4, kBlock);
  PrefixHasher hasher;
  const BlockHash root = hasher.Root("m", "");
  std::vector<int32_t> tokens(16);
  for (int i = 0; i < 16; ++i) tokens[i] = i;
  std::vector<BlockHash> hashes;
  hasher.Extend(root, tokens, kBlock, 4, &hashes);
  std::vector<int32_t> a;
  REQUIRE(cache.Grow(&a, 16));
  cache.Publish(a, hashes, 0, tokens);
  std::vector<int32_t> b;
  REQUIRE(cache.AcquirePrefix(hashes, 3, tokens, &b) == 3);  // every block referenced
  std::vector<int32_t> c;
  CHECK_FALSE(cache.Grow(&c, 1));
  CHECK(c.empty());
  cache.Free(&a);
  CHECK(cache.free_blocks() == 1);  // the last block: cached, unreferenced
  REQUIRE(cache.Grow(&c, 1));       // evicts it
  CHECK(cache.evictions() == 1);
  CHECK(cache.cached_blocks() == 3);
  const std::vector<std::vector<int32_t>> tables = {b, c};
  CHECK(cache.CheckInvariants(tables).empty());
}

}  // namespace
}  // namespace exa::engine
