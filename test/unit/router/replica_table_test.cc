// The table's per-model pools keep kv-token-aware's tiers and sums in step with every report,
// dispatch, completion, health change, ejection, move and removal (checked against a
// recomputation after each random step), and the decision taken from the tiers never picks a
// replica of a worse tier than one that is free. A report clears only the dispatches it says it
// counts.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "router/replica_table.h"

namespace exa::router {
namespace {

TEST_CASE("table: tiers and sums follow random reports, dispatches and health", "[router]") {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    ReplicaTable table(Policy::kKvTokenAware, seed);
    std::vector<std::string> ids;
    for (int i = 0; i < 12; ++i) ids.push_back("r" + std::to_string(i));
    const auto model = [&] { return rng() % 4 == 0 ? std::string("n") : std::string("m"); };
    for (const auto& id : ids) table.Upsert({id, model(), "v1", {}});
    std::vector<ReplicaTable::Choice> open;
    for (int step = 0; step < 2000; ++step) {
      const std::string& id = ids[rng() % ids.size()];
      switch (rng() % 8) {
        case 0:
        case 1: {
          LoadReport r;
          r.ready = rng() % 5 != 0;
          r.pending_tokens = static_cast<int64_t>(rng() % 5000) - 100;  // a bad one now and then
          r.sequences = static_cast<int32_t>(rng() % 10);
          r.waiting = rng() % 4 == 0 ? 1 : 0;
          r.slots = static_cast<int32_t>(rng() % 6);
          // Half the reports say which dispatches they count (some not yet made).
          if (rng() % 2 == 0) r.admitted_dispatch = rng() % (step + 2);
          table.Report(id, r);
          break;
        }
        case 2:
          table.SetHealthy(id, rng() % 4 != 0);
          break;
        case 3:
          table.SetEjected(id, rng() % 5 == 0);
          break;
        case 4:
          if (rng() % 10 == 0) {
            table.Remove(id);
          } else {
            table.Upsert({id, model(), "v1", {}});
          }
          break;
        case 5:
          if (!open.empty()) {
            // Now and then as if the dispatch number were lost.
            table.Complete(open.back().replica, rng() % 8 == 0 ? 0 : open.back().dispatch);
            open.pop_back();
          }
          break;
        default: {
          RouteRequest request{
              rng() % 2 == 0 ? "m" : "n", "", static_cast<int64_t>(rng() % 2000), {}};
          if (rng() % 5 == 0) request.exclude = {ids[rng() % ids.size()]};  // the full pass
          auto chosen = table.ChooseFor(request);
          if (chosen.ok()) open.push_back(*chosen);
        }
      }
      const std::string err = table.CheckInvariants();
      INFO("step " << step);
      REQUIRE(err.empty());
    }
  }
}

TEST_CASE("table: the tiered decision takes a free slot over fewer tokens", "[router]") {
  ReplicaTable table(Policy::kKvTokenAware, 3);
  for (int i = 0; i < 64; ++i) {
    const std::string id = "r" + std::to_string(i);
    table.Upsert({id, "m", "v1", {}});
    // Every replica but r7 is full (4 of 4 slots) with a short queue; r7 has a long queue and
    // a free slot.
    table.Report(id, {i == 7 ? 40000 : 100, i == 7 ? 2 : 4, true, 0, 0, 0, 4});
  }
  CHECK(*table.Choose({"m", "", 100, {}}) == "r7");
  CHECK(table.CheckInvariants().empty());
  // r7 is now 3 of 4: one more fills it, and then the rest compete again on tokens.
  CHECK(*table.Choose({"m", "", 100, {}}) == "r7");
  CHECK(*table.Choose({"m", "", 100, {}}) != "r7");
}

TEST_CASE("table: a choice carries the work ahead of the request's first token", "[router]") {
  for (Policy policy : {Policy::kKvTokenAware, Policy::kLeastConnections}) {
    ReplicaTable table(policy, 1);
    table.Upsert({"r0", "m", "v1", {}});
    // 1000 tokens pending over 2 sequences: 500 expected per request dispatched since.
    table.Report("r0", {1000, 2, true, 0, 0, 0, 8});
    auto first = table.ChooseFor({"m", "", 100, {}});
    REQUIRE(first.ok());
    CHECK(first->replica == "r0");
    CHECK(first->tokens_ahead == 1000 + 100);  // the queue, then this prompt
    auto second = table.ChooseFor({"m", "", 50, {}});
    REQUIRE(second.ok());
    // The first dispatch's prompt and its expected decode now sit ahead of the second.
    CHECK(second->tokens_ahead == 1000 + 100 + 500 + 50);
  }
}

TEST_CASE("table: a report clears only the dispatches it counts", "[router]") {
  ReplicaTable table(Policy::kLeastConnections, 1);
  table.Upsert({"r0", "m", "v1", {}});
  table.Report("r0", {0, 0, true, 0, 0, 0, 8});
  const auto dispatched = [&] {
    const ReplicaSnapshot s = table.List().at(0);
    return std::make_pair(s.dispatched_tokens, s.open_requests);
  };
  std::vector<ReplicaTable::Choice> sent;
  for (int64_t prompt : {100, 200, 300}) {
    auto c = table.ChooseFor({"m", "", prompt, {}});
    REQUIRE(c.ok());
    sent.push_back(*c);
  }
  CHECK(sent[0].dispatch < sent[1].dispatch);
  CHECK(sent[1].dispatch < sent[2].dispatch);
  CHECK(dispatched() == std::make_pair(int64_t{600}, 3));

  // The node had admitted only the first when it read its load: the other two still count on
  // top of the report, which already holds the first.
  LoadReport r{100, 1, true, 0, 0, 0, 8};
  r.admitted_dispatch = sent[0].dispatch;
  table.Report("r0", r);
  CHECK(dispatched() == std::make_pair(int64_t{500}, 3));
  CHECK(table.CheckInvariants().empty());

  // The second never reached the node (or finished before any report counted it): its
  // completion takes it out; the first's completion has nothing left to take.
  table.Complete("r0", sent[1].dispatch);
  table.Complete("r0", sent[0].dispatch);
  CHECK(dispatched() == std::make_pair(int64_t{300}, 1));

  // A report that names none of them (0: nothing admitted yet from this gateway) keeps them all.
  r.admitted_dispatch = 0;
  table.Report("r0", r);
  CHECK(dispatched() == std::make_pair(int64_t{300}, 1));

  // One without the field (a reporter that does not say) counts everything before it.
  table.Report("r0", {400, 2, true, 0, 0, 0, 8});
  CHECK(dispatched() == std::make_pair(int64_t{0}, 1));
  CHECK(table.CheckInvariants().empty());
}

}  // namespace
}  // namespace exa::router
