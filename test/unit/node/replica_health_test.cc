// Health levels: a step loop that stops while it has work is caught at the process level, a
// wrong or missing probe answer at the model level, and both heal when the replica recovers.
#include "node/replica_health.h"

#include <catch2/catch.hpp>

namespace exa::node {
namespace {

TEST_CASE("A stalled step loop with work queued is unhealthy until it moves again", "[health]") {
  ReplicaHealth h{HealthOptions{}};
  h.OnProcessCheck(10, true);
  CHECK(h.healthy());
  h.OnProcessCheck(25, true);  // moving
  CHECK(h.healthy());
  h.OnProcessCheck(25, true);  // work queued, no step
  CHECK_FALSE(h.healthy());
  CHECK(h.reason().find("step loop stalled") != std::string::npos);
  h.OnProcessCheck(26, true);
  CHECK(h.healthy());
  h.OnProcessCheck(26, false);  // idle is not stalled
  CHECK(h.healthy());
  h.OnProcessCheck(26, true);  // work arrived just now at an idle replica: not a stall yet
  CHECK(h.healthy());
  h.OnProcessCheck(26, true);  // a whole interval with work and no step: stalled
  CHECK_FALSE(h.healthy());
}

TEST_CASE("The probe must contain the expected answer in time", "[health]") {
  ReplicaHealth h{HealthOptions{}};
  h.OnProbeResult(std::string("2"));
  CHECK(h.healthy());
  h.OnProbeResult(std::string("3"));
  CHECK_FALSE(h.healthy());
  CHECK(h.reason() == "model probe \"1+1=\" answered \"3\", expected \"2\"");
  h.OnProbeResult(std::nullopt);
  CHECK(h.reason() == "model probe \"1+1=\" not answered within 10s");
  h.OnProbeResult(std::string("2"));
  CHECK(h.healthy());
  CHECK(h.probes_ok() == 2);
  CHECK(h.probes_failed() == 2);
}

TEST_CASE("Without an expected answer the first one is golden", "[health]") {
  HealthOptions o;
  o.probe_expect = "";
  ReplicaHealth h{o};
  h.OnProbeResult(std::string("Paris"));
  CHECK(h.golden() == "Paris");
  CHECK(h.healthy());
  h.OnProbeResult(std::string("Lyon"));
  CHECK_FALSE(h.healthy());
}

}  // namespace
}  // namespace exa::node
