// What `exaserve-cli describe` shows: ready counts live nodes only (as the replicas-ready
// metric), and a replica rebuilt after its node died is listed once, not with its dead copy.
#include <catch2/catch.hpp>

#include "nlohmann/json.hpp"
#include "scheduler/describe.h"

namespace exa::scheduler {
namespace {

using nlohmann::json;

ReplicaRecord Ready(int ordinal, uint64_t generation) {
  ReplicaRecord r;
  r.deployment = "tiny@v1";
  r.ordinal = ordinal;
  r.generation = generation;
  r.phase = ReplicaPhase::kReady;
  return r;
}

TEST_CASE("describe: ready excludes replicas on suspect or dead nodes") {
  DeploymentStatus s;
  s.desired = 3;
  s.present = 3;
  s.ready = 3;
  s.lost = 1;
  s.ready_lost = 1;
  json j = json::parse(DescribeStatusJson(s, 0));
  CHECK(j["ready"] == 2);
  CHECK(j["ready_lost"] == 1);
  CHECK(j["present"] == 3);
}

TEST_CASE("describe: a dead node's superseded generation is not listed after the rebuild") {
  std::map<std::string, NodeStatus> nodes;
  nodes["a"].replicas = {Ready(0, 1)};
  nodes["b"].replicas = {Ready(1, 1)};
  nodes["b"].liveness = NodeLiveness::kDead;
  nodes["c"].replicas = {Ready(1, 2)};  // ordinal 1 rebuilt on c
  ReplicaRecord other = Ready(0, 1);
  other.deployment = "other@v1";
  nodes["c"].replicas.push_back(other);
  int stopping = 0;
  json list = json::parse(DescribeReplicasJson(nodes, "tiny", &stopping));
  REQUIRE(list.size() == 2);
  CHECK(list[0]["node"] == "a");
  CHECK(list[1]["node"] == "c");
  CHECK(list[1]["generation"] == 2);
  CHECK(stopping == 0);

  SECTION("until rebuilt, the dead node's copy stays listed, with its node's state") {
    nodes["c"].replicas.clear();
    list = json::parse(DescribeReplicasJson(nodes, "tiny", &stopping));
    REQUIRE(list.size() == 2);
    CHECK(list[1]["node"] == "b");
    CHECK(list[1]["node_state"] == "dead");
  }
  SECTION("a surge copy beside a live replica is listed with it") {
    nodes["b"].liveness = NodeLiveness::kAlive;
    list = json::parse(DescribeReplicasJson(nodes, "tiny", &stopping));
    CHECK(list.size() == 3);
  }
  SECTION("replicas draining after a stop are counted, not listed") {
    nodes["a"].replicas[0].stopping = true;
    list = json::parse(DescribeReplicasJson(nodes, "tiny", &stopping));
    CHECK(list.size() == 1);
    CHECK(stopping == 1);
  }
}

TEST_CASE("describe: an autoscaled deployment's autoscaler, its value, target and last decision") {
  DesiredDeployment d;
  d.spec.name = "tiny";
  d.spec.autoscaling.enabled = true;
  d.spec.autoscaling.min_replicas = 2;
  d.spec.autoscaling.max_replicas = 10;
  d.spec.autoscaling.target = 300;
  AutoscaleReport now{"tiny", 6, 1, 4, 4, 450.0, false, 0, "pendingTokensPerReplica 450 tokens"};
  AutoscaleState stored{6, 1'700'000'000'000, "up: 450 tokens against 300"};
  json a = json::parse(DescribeAutoscalingJson(now, stored, d));
  CHECK(a["metric"] == "pendingTokensPerReplica");
  CHECK(a["unit"] == "tokens");
  CHECK(a["target"] == 300);
  CHECK(a["current"] == 4);
  CHECK(a["desired"] == 6);
  CHECK(a["value"] == 450.0);
  CHECK(a["last_decision"]["desired"] == 6);
  CHECK(a["last_decision"]["at"] == "2023-11-14T22:13:20+00:00");
  CHECK(a["last_decision"]["reason"] == "up: 450 tokens against 300");

  SECTION("nothing reported, nothing stored, latency metric") {
    d.spec.autoscaling.metric = "ttftP99";
    now.value = -1;
    a = json::parse(DescribeAutoscalingJson(now, std::nullopt, d));
    CHECK(a["unit"] == "seconds");
    CHECK(a["value"].is_null());
    CHECK(a["last_decision"].is_null());
  }
}

}  // namespace
}  // namespace exa::scheduler
