// Seeded simulations through the real SWIM core: failures are detected with no false deaths,
// 10 % loss causes no false deaths, a partition heals, a paused node comes back, role election
// agrees, and a run replays exactly from its seed. A failure prints its seed.
#include "sim/gossip_sim.h"

#include <catch2/catch.hpp>

namespace exa::sim {
namespace {

GossipSimOptions Base(uint64_t seed) {
  GossipSimOptions o;
  o.nodes = 48;
  o.seed = seed;
  o.racks = 6;
  o.duration_s = 40;
  return o;
}

TEST_CASE("Killed nodes are detected and nobody healthy dies", "[sim][gossip]") {
  for (uint64_t seed : {1, 2, 3}) {
    GossipSimOptions o = Base(seed);
    o.kill = 3;
    nlohmann::json r = RunGossipSim(o);
    INFO("seed " << seed << " " << r.dump());
    CHECK(r["converged_before_window"] == true);
    CHECK(r["suspect_first_s"]["n"] == 3);
    CHECK(r["dead_everywhere_s"]["n"] == 3);
    // N = 48: min = 4 * log10(48) = 6.7 s; detection adds a few probe intervals.
    CHECK(r["dead_confirmed_s"]["max"].get<double>() < 15);
    CHECK(r["false_deaths"] == 0);
    CHECK(r["dissemination_s"]["p99"].get<double>() < 3);
    CHECK(r["election_agreement"] == 1.0);
    CHECK(r["totals"]["bad_packets"] == 0);
  }
}

TEST_CASE("Ten percent packet loss causes no false deaths", "[sim][gossip]") {
  for (uint64_t seed : {1, 2}) {
    GossipSimOptions o = Base(seed);
    o.loss = 0.10;
    o.duration_s = 120;
    nlohmann::json r = RunGossipSim(o);
    INFO("seed " << seed << " " << r.dump());
    CHECK(r["false_deaths"] == 0);
  }
}

TEST_CASE("Two halves that declared each other dead merge after the partition heals",
          "[sim][gossip]") {
  for (uint64_t seed : {1, 2}) {
    GossipSimOptions o = Base(seed);
    o.partition_s = 60;
    o.duration_s = 150;
    nlohmann::json r = RunGossipSim(o);
    INFO("seed " << seed << " " << r.dump());
    REQUIRE_FALSE(r["reconverge_after_heal_s"].is_null());
    CHECK(r["reconverge_after_heal_s"].get<double>() <= 60);
    CHECK(r["false_deaths"] == 0);
  }
}

TEST_CASE("A paused node is suspected and is alive again after it resumes", "[sim][gossip]") {
  for (double pause_s : {3.0, 20.0, 60.0}) {
    GossipSimOptions o = Base(7);
    o.pause_nodes = 1;
    o.pause_s = pause_s;
    o.duration_s = pause_s + 40;
    nlohmann::json r = RunGossipSim(o);
    INFO("pause " << pause_s << " s " << r.dump());
    CHECK(r["pause"]["suspected"] == 1);
    CHECK(r["pause"]["back_alive"] == 1);
    if (pause_s >= 60) CHECK(r["pause"]["declared_dead"] == 1);
    if (pause_s <= 3) CHECK(r["pause"]["declared_dead"] == 0);
    CHECK(r["false_deaths"] == 0);
  }
}

TEST_CASE("The same seed replays the same run", "[sim][gossip]") {
  GossipSimOptions o = Base(11);
  o.kill = 2;
  o.loss = 0.05;
  nlohmann::json a = RunGossipSim(o), b = RunGossipSim(o);
  a.erase("wall_s");
  b.erase("wall_s");
  CHECK(a == b);
}

TEST_CASE("Command-line flags parse with clear errors", "[sim][gossip]") {
  auto o = ParseGossipSimArgs({"--nodes", "256", "--seed", "3", "--loss", "10%", "--pause", "2:20",
                               "--partition=halves:60", "--racks", "16"});
  REQUIRE(o.ok());
  CHECK(o->nodes == 256);
  CHECK(o->loss == Approx(0.10));
  CHECK(o->pause_nodes == 2);
  CHECK(o->pause_s == 20);
  CHECK(o->partition_s == 60);
  CHECK_FALSE(ParseGossipSimArgs({"--partition", "thirds:5"}).ok());
  CHECK_FALSE(ParseGossipSimArgs({"--loss", "1.5"}).ok());
  CHECK_FALSE(ParseGossipSimArgs({"--bogus", "1"}).ok());
  CHECK_FALSE(ParseGossipSimArgs({"--nodes", "4", "--kill", "4"}).ok());
}

}  // namespace
}  // namespace exa::sim
