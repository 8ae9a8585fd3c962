#include "router/outliers.h"

#include <catch2/catch.hpp>

#include <set>

namespace exa::router {
namespace {

ReplicaSnapshot Replica(const std::string& id, const std::string& model, double itl_p99_ms) {
  ReplicaSnapshot s;
  s.info = {id, model, "v1", {}};
  s.report.itl_p99_ms = itl_p99_ms;
  return s;
}

TEST_CASE("A replica twice as slow as its peers is an outlier; its peers are not") {
  auto out = SlowOutliers(
      {Replica("a", "m", 20), Replica("b", "m", 21), Replica("c", "m", 41), Replica("d", "m", 19)},
      {});
  REQUIRE(out.size() == 1);
  CHECK(out[0].id == "c");
  CHECK(out[0].model_median_ms == Approx(20.5));
}

TEST_CASE("Models are judged separately, and only with enough measured peers") {
  // Model "big" is uniformly slower: no outlier. Model "few" has two measured replicas (one
  // unmeasured): not enough peers to judge.
  auto out =
      SlowOutliers({Replica("a", "big", 80), Replica("b", "big", 82), Replica("c", "big", 79),
                    Replica("d", "small", 20), Replica("e", "small", 20), Replica("f", "small", 20),
                    Replica("g", "few", 10), Replica("h", "few", 50), Replica("i", "few", 0)},
                   {1.5, 3});
  CHECK(out.empty());
}

TEST_CASE("Within the factor is not an outlier") {
  CHECK(
      SlowOutliers({Replica("a", "m", 20), Replica("b", "m", 20), Replica("c", "m", 29)}, {1.5, 3})
          .empty());
  CHECK(
      SlowOutliers({Replica("a", "m", 20), Replica("b", "m", 20), Replica("c", "m", 31)}, {1.5, 3})
          .size() == 1);
}

TEST_CASE("An ejected replica gets no traffic") {
  ReplicaTable table(Policy::kRoundRobin, 1);
  for (const char* id : {"a", "b"}) {
    table.Upsert({id, "m", "v1", {}});
    table.Report(id, {0, 0, true});
  }
  table.SetEjected("a", true);
  for (int i = 0; i < 10; ++i) {
    auto r = table.ChooseFor({"m", "", 5});
    REQUIRE(r.ok());
    CHECK(r->replica == "b");
    table.Complete(r->replica, r->dispatch);
  }
}

TEST_CASE("An ejected replica that leaves the table comes back ejected until readmitted") {
  // Its node's load stream restarted: the gateway removes its replicas and adds them again.
  ReplicaTable table(Policy::kRoundRobin, 1);
  for (const char* id : {"a", "b"}) {
    table.Upsert({id, "m", "v1", {}});
    table.Report(id, {0, 0, true});
  }
  table.SetEjected("a", true);
  table.Remove("a");
  table.Upsert({"a", "m", "v1", {}});
  table.Report("a", {0, 0, true});
  const auto chosen = [&] {
    std::set<std::string> seen;
    for (int i = 0; i < 10; ++i) {
      auto r = table.ChooseFor({"m", "", 5});
      REQUIRE(r.ok());
      seen.insert(r->replica);
      table.Complete(r->replica, r->dispatch);
    }
    return seen;
  };
  CHECK(chosen() == std::set<std::string>{"b"});
  table.SetEjected("a", false);
  CHECK(chosen() == std::set<std::string>{"a", "b"});
  // Readmitted, it is forgotten: leaving and coming back again does not eject it.
  table.Remove("a");
  table.Upsert({"a", "m", "v1", {}});
  table.Report("a", {0, 0, true});
  CHECK(chosen() == std::set<std::string>{"a", "b"});
}

}  // namespace
}  // namespace exa::router
