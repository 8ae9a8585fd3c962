// Routing policies pick what their definition says: token-aware by pending tokens (with the
// gateway's own dispatches counted), least-connections by open requests; the table filters by
// model, version, readiness and health and names what is missing.
#include <map>
#include <memory>

#include <catch2/catch.hpp>

#include "common/strings.h"
#include "router/policy.h"
#include "router/replica_table.h"

namespace exa::router {
namespace {

TEST_CASE("Token-aware picks the replica with the fewest pending tokens", "[router]") {
  Random random(1);
  PolicyState state;
  std::vector<Candidate> c = {{5000, 0, 1, 0, 1}, {100, 0, 9, 0, 9}, {3000, 0, 1, 0, 1}};
  for (int i = 0; i < 20; ++i) {
    CHECK(*Pick(Policy::kTokenAware, c, 50, {}, state, random) == 1);
  }
  // Least-connections is fooled by the one long request: it picks a replica with 1 open.
  CHECK(*Pick(Policy::kLeastConnections, c, 50, {}, state, random) != 1);
}

TEST_CASE("Tokens dispatched since the last report count against a replica", "[router]") {
  Random random(2);
  PolicyState state;
  std::vector<Candidate> c = {{100, 4000, 0, 2, 2}, {1000, 0, 0, 0, 0}};
  CHECK(*Pick(Policy::kTokenAware, c, 10, {}, state, random) == 1);
}

TEST_CASE("Near-equal replicas share the load instead of herding", "[router]") {
  Random random(3);
  PolicyState state;
  std::vector<Candidate> c(4, Candidate{1000, 0, 0, 0, 0});
  std::map<size_t, int> hits;
  for (int i = 0; i < 400; ++i) hits[*Pick(Policy::kTokenAware, c, 10, {}, state, random)]++;
  CHECK(hits.size() == 4);
  for (auto& [i, n] : hits) CHECK(n > 50);
}

TEST_CASE("A request dispatched since the report counts its expected decode, not just its prompt",
          "[router]") {
  Random random(4);
  PolicyState state;
  // The pool reports 300 pending tokens per sequence. Replica 0 looked 1000 tokens cheaper at
  // the report, but this gateway has sent it 8 requests since (400 prompt tokens): counting only
  // prompts it would still win; with 8 x ~300 expected decode tokens it is the dearer one, by
  // more than the near-equal slack.
  std::vector<Candidate> c = {{9000, 400, 30, 8, 8}, {10000, 0, 34, 0, 0}};
  CHECK(*Pick(Policy::kTokenAware, c, 50, {}, state, random) == 1);
}

TEST_CASE("Token-aware skips a replica with a queue while another has a free slot", "[router]") {
  Random random(5);
  PolicyState state;
  // Replica 0 owes few tokens but reported 5 requests waiting for a batch slot.
  Candidate saturated{1000, 0, 69, 0, 0, 5};
  Candidate busy_but_free{5000, 0, 40, 0, 0, 0};
  std::vector<Candidate> c = {saturated, busy_but_free};
  for (int i = 0; i < 20; ++i) CHECK(*Pick(Policy::kTokenAware, c, 50, {}, state, random) == 1);
  // When every replica has a queue, tokens decide again.
  c[1].reported_waiting = 3;
  CHECK(*Pick(Policy::kTokenAware, c, 50, {}, state, random) == 0);
}

TEST_CASE("Among near-equal replicas token-aware prefers more free batch slots", "[router]") {
  Random random(6);
  PolicyState state;
  // Same work (within the near-equal slack), but replica 1 runs 10 sequences, not 60.
  std::vector<Candidate> c = {{1000, 0, 60, 0, 0}, {1010, 0, 10, 0, 0}};
  std::map<size_t, int> hits;
  for (int i = 0; i < 400; ++i) hits[*Pick(Policy::kTokenAware, c, 10, {}, state, random)]++;
  // Two draws: replica 0 only when both draws are 0 (1 in 4).
  CHECK(hits[1] > 250);
  CHECK(hits[0] > 50);  // still sharing: no herding onto the emptier one
}

TEST_CASE("A long prompt counts backlogs within its own size as equal", "[router]") {
  Random random(7);
  PolicyState state;
  // Replica 0 owes 2000 tokens fewer but runs 60 sequences; replica 1 runs 10. For a 50-token
  // prompt the 2000 tokens decide; for a 3000-token prompt they are within the prompt's own size
  // and the emptier replica (larger prefill budget per step) wins the draws it is in.
  std::vector<Candidate> c = {{10000, 0, 60, 0, 0}, {12000, 0, 10, 0, 0}};
  std::map<size_t, int> short_hits, long_hits;
  for (int i = 0; i < 400; ++i) {
    short_hits[*Pick(Policy::kTokenAware, c, 50, {}, state, random)]++;
    long_hits[*Pick(Policy::kTokenAware, c, 3000, {}, state, random)]++;
  }
  CHECK(short_hits[0] == 400);
  CHECK(long_hits[1] > 250);
  CHECK(long_hits[0] > 50);
}

// Candidate fields in order: reported pending, dispatched tokens, reported sequences, dispatched
// requests, open requests, reported waiting, slots, cached tokens.
TEST_CASE("KV-token-aware sends a request where its prefix is cached", "[router]") {
  Random random(11);
  PolicyState state;
  // Three equally loaded replicas; replica 2 holds 7 000 of the 8 000-token prompt.
  std::vector<Candidate> c(3, Candidate{20000, 0, 8, 0, 8, 0, 16, 0});
  c[2].cached_tokens = 7000;
  for (int i = 0; i < 50; ++i) CHECK(*Pick(Policy::kKvTokenAware, c, 8000, {}, state, random) == 2);
  // Without a cached prefix it is token-aware: the fewest pending tokens.
  std::vector<Candidate> plain = {{5000, 0, 1, 0, 1, 0, 16, 0}, {100, 0, 9, 0, 9, 0, 16, 0}};
  for (int i = 0; i < 20; ++i) {
    CHECK(*Pick(Policy::kKvTokenAware, plain, 50, {}, state, random) == 1);
  }
}

TEST_CASE("KV-token-aware spreads gateways that share a stale view", "[router]") {
  Random random(14);
  PolicyState state;
  // Eight replicas the last report showed nearly alike: power of two choices sends requests to
  // all but the dearest (it loses every pair) instead of every gateway to the cheapest.
  std::vector<Candidate> c;
  for (int64_t i = 0; i < 8; ++i) c.push_back({1000 + 10 * i, 0, 2, 0, 2, 0, 16, 0});
  std::map<size_t, int> hits;
  for (int i = 0; i < 800; ++i) hits[*Pick(Policy::kKvTokenAware, c, 50, {}, state, random)]++;
  CHECK(hits.size() == 7);
  CHECK(hits.count(7) == 0);
  CHECK(hits[0] < 400);
  CHECK(hits[0] > hits[6]);  // the cheaper still wins more often
}

TEST_CASE("KV-token-aware does not pile onto a hot replica for its cache", "[router]") {
  Random random(12);
  PolicyState state;
  // Replica 0 holds the prefix but owes 200 000 tokens, far over 1.5 x the mean plus the
  // prompt: its cache earns it nothing and the idle replicas win.
  std::vector<Candidate> c = {{200000, 0, 15, 0, 15, 0, 16, 7000},
                              {1000, 0, 1, 0, 1, 0, 16, 0},
                              {1200, 0, 1, 0, 1, 0, 16, 0}};
  for (int i = 0; i < 50; ++i) CHECK(*Pick(Policy::kKvTokenAware, c, 8000, {}, state, random) != 0);
}

TEST_CASE("KV-token-aware prefers a free batch slot to fewer tokens", "[router]") {
  Random random(13);
  PolicyState state;
  // Replica 0 owes fewer tokens but its 4 slots are taken (3 reported + 1 sent since): the
  // request would wait for one to end. Replica 1 has a slot free.
  std::vector<Candidate> c = {{300, 50, 3, 1, 4, 0, 4, 0}, {2000, 0, 2, 0, 2, 0, 4, 0}};
  for (int i = 0; i < 20; ++i) CHECK(*Pick(Policy::kKvTokenAware, c, 50, {}, state, random) == 1);
  // When no replica has a slot free, tokens decide again.
  c[1].reported_sequences = 4;
  for (int i = 0; i < 20; ++i) CHECK(*Pick(Policy::kKvTokenAware, c, 50, {}, state, random) == 0);
}

TEST_CASE("Only the holders of nearly the longest prefix challenge the draws", "[router]") {
  Random random(15);
  CHECK(AffinityHolders({}, random).empty());
  // One deep holder among shallow ones (the conversation's replica among replicas that hold
  // only the system prompt) and one that holds three quarters as much: those two alone.
  const std::vector<int64_t> deep = {512, 512, 40960, 512, 30720, 512};
  CHECK(AffinityHolders(deep, random) == std::vector<size_t>{2, 4});
  // Every replica holds the same prefix: two distinct holders at random, each in turn.
  const std::vector<int64_t> shared(48, 512);
  std::map<size_t, int> drawn;
  for (int i = 0; i < 2000; ++i) {
    const std::vector<size_t> two = AffinityHolders(shared, random);
    REQUIRE(two.size() == 2);
    CHECK(two[0] != two[1]);
    for (size_t h : two) drawn[h]++;
  }
  CHECK(drawn.size() == 48);
}

TEST_CASE("Gateways do not pile a burst onto the least-loaded holder of a shared prefix",
          "[router]") {
  // 48 replicas all hold a prompt's first 32 blocks (a 512-token system prompt every request
  // starts with); replica 7 reported slightly less work. 16 gateways, sharing that view and the
  // index, each route one request of a burst before any report: were the cheapest holder to
  // challenge the draws, all 16 would go to replica 7.
  PrefixIndex index;
  std::vector<Hash128> chain;
  for (uint64_t i = 1; i <= 500; ++i) chain.push_back(Hash128{i * 7919, i});
  std::vector<std::unique_ptr<ReplicaTable>> gateways;
  for (uint64_t g = 0; g < 16; ++g) {
    gateways.push_back(std::make_unique<ReplicaTable>(Policy::kKvTokenAware, 100 + g));
    gateways.back()->SetPrefixIndex(&index);
  }
  for (int r = 0; r < 48; ++r) {
    const std::string id = StrCat("r", r);
    PrefixCacheDelta snap{.epoch = 1, .snapshot = true, .from = 0, .to = 32};
    snap.cache_namespace = "m@v1/cpu";
    for (size_t b = 0; b < 32; ++b) snap.events.push_back({true, chain[b]});
    REQUIRE(index.Apply(id, snap) == PrefixIndex::Applied::kApplied);
    for (auto& t : gateways) {
      t->Upsert({id, "m", "v1", {}});
      t->Report(id, {r == 7 ? 4000 : 4100, 4, true, 0, 0, 0, 16});
    }
  }
  std::map<std::string, int> picks;
  for (auto& t : gateways) {
    RouteRequest request{"m", "", 8000, {}};
    request.block_hashes = [&](const std::string&, size_t) {
      return std::span<const Hash128>(chain);
    };
    request.block_tokens = 16;
    picks[*t->Choose(request)]++;
  }
  int most = 0;
  for (const auto& [id, n] : picks) most = std::max(most, n);
  CHECK(most <= 4);
  CHECK(picks.size() >= 8);
}

TEST_CASE("Round-robin cycles and an empty list has no pick", "[router]") {
  Random random(4);
  PolicyState state;
  std::vector<Candidate> c(3);
  CHECK(*Pick(Policy::kRoundRobin, c, 0, {}, state, random) == 0);
  CHECK(*Pick(Policy::kRoundRobin, c, 0, {}, state, random) == 1);
  CHECK(*Pick(Policy::kRoundRobin, c, 0, {}, state, random) == 2);
  CHECK_FALSE(Pick(Policy::kTokenAware, {}, 0, {}, state, random).has_value());
  CHECK(ParsePolicy("token-aware").value() == Policy::kTokenAware);
  CHECK(ParsePolicy("kv-token-aware").value() == Policy::kKvTokenAware);
  CHECK(std::string(ParsePolicy("fastest").status().message()).find("kv-token-aware") !=
        std::string::npos);
}

TEST_CASE("The table filters by model, version, readiness and health", "[router]") {
  ReplicaTable table(Policy::kTokenAware, 5);
  table.Upsert({"a", "m", "v1", {}});
  table.Upsert({"b", "m", "v2", {}});
  CHECK(table.Choose({"m", "", 10}).status().code() == absl::StatusCode::kUnavailable);
  table.Report("a", {0, 0, true});
  table.Report("b", {0, 0, true});
  CHECK(*table.Choose({"m", "v2", 10}) == "b");
  auto unknown = table.Choose({"other", "", 10});
  CHECK(unknown.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(unknown.status().message()) ==
        "model \"other\": not served here; available: m");
  CHECK(table.Choose({"m", "v9", 10}).status().code() == absl::StatusCode::kNotFound);
  table.SetHealthy("a", false);
  for (int i = 0; i < 5; ++i) CHECK(*table.Choose({"m", "", 10}) == "b");
  auto list = table.List();
  CHECK(list[1].open_requests == 6);
  table.Complete("b", 0);
  CHECK(table.List()[1].open_requests == 5);
}

TEST_CASE("The table credits the prefix a replica's index entry holds", "[router]") {
  PrefixIndex index;
  ReplicaTable table(Policy::kKvTokenAware, 6);
  table.SetPrefixIndex(&index);
  for (const char* id : {"a", "b", "c"}) {
    table.Upsert({id, "m", "v1", {}});
    table.Report(id, {5000, 4, true});
  }
  // b reports the prompt's first 8 blocks (every block: report_every_blocks 1).
  std::vector<Hash128> chain;
  for (uint64_t i = 1; i <= 10; ++i) chain.push_back(Hash128{i * 7919, i});
  PrefixCacheDelta snap{.epoch = 1, .snapshot = true, .from = 0, .to = 8};
  snap.cache_namespace = "m@v1/cpu";
  for (int i = 0; i < 8; ++i) snap.events.push_back({true, chain[static_cast<size_t>(i)]});
  REQUIRE(index.Apply("b", snap) == PrefixIndex::Applied::kApplied);
  // Another model's replica: its namespace is never hashed for this model's prompts.
  table.Upsert({"x", "other", "v1", {}});
  table.Report("x", {0, 0, true});
  PrefixCacheDelta other{.epoch = 1, .snapshot = true, .from = 0, .to = 1};
  other.cache_namespace = "other@v1/cpu";
  other.events.push_back({true, chain[0]});
  REQUIRE(index.Apply("x", other) == PrefixIndex::Applied::kApplied);
  RouteRequest request{"m", "", 160, {}};
  std::vector<std::string> asked;
  size_t deepest = 0;
  request.block_hashes = [&](const std::string& ns, size_t blocks) {
    if (asked.empty() || asked.back() != ns) asked.push_back(ns);
    deepest = std::max(deepest, blocks);
    return ns == "m@v1/cpu" ? std::span<const Hash128>(chain) : std::span<const Hash128>();
  };
  request.block_tokens = 16;
  CHECK(*table.Choose(request) == "b");
  // Once, for b's namespace: a and c have reported no cache yet, x serves another model.
  CHECK(asked == std::vector<std::string>{"m@v1/cpu"});
  // One round of hashing, 8 blocks asked (the callback may hand over more: here all 10, which
  // the walk uses to see b's match end at block 8).
  CHECK(deepest == 8);
  // The dispatch added only the 32 uncached tokens to b's queue.
  for (const ReplicaSnapshot& r : table.List()) {
    CHECK(r.dispatched_tokens == (r.info.id == "b" ? 32 : 0));
  }
  // Without hashes the same request has no affinity (b now owes a little more).
  std::map<std::string, int> picks;
  for (int i = 0; i < 30; ++i) {
    picks[*table.Choose({"m", "", 160, {}})]++;
  }
  CHECK(picks.size() >= 2);
}

}  // namespace
}  // namespace exa::router
