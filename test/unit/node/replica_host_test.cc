// ReplicaHost: replicas spread over the node's GPUs, and a replica whose engine cannot start
// (here: the cuda backend on a machine without a GPU, or a GPU that does not exist) fails alone,
// listed with its reason, while the node and its other replicas keep serving.
#include "node/replica_host.h"

#include <catch2/catch.hpp>

#include "common/strings.h"

namespace exa::node {
namespace {

TEST_CASE("replicas are spread over the configured GPUs, else over every GPU found", "[node]") {
  CHECK(AssignGpus(5, {}, 2) == std::vector<int>{0, 1, 0, 1, 0});
  CHECK(AssignGpus(4, {3, 5}, 8) == std::vector<int>{3, 5, 3, 5});  // the list wins
  CHECK(AssignGpus(3, {}, 0) == std::vector<int>{0, 0, 0});  // no inventory: GPU 0, fails there
  CHECK(AssignGpus(0, {1}, 2).empty());
}

TEST_CASE("a replica that cannot start fails alone, with the CUDA reason", "[node]") {
  const std::string bundled = FindBundledModel();
  REQUIRE_FALSE(bundled.empty());
  InferenceOptions o;
  o.models = {bundled, bundled + "@v2"};
  o.replicas_per_model = 2;
  o.backend = "cuda";
  o.gpus = {"7"};  // no such GPU on any test machine with fewer than 8
  o.kv_cache_bytes.value = 8 << 20;
  ReplicaHost host("0123456789abcdef", o);
  REQUIRE(host.Start().ok());  // the node starts: a failed replica is not a failed node
  if (!host.replicas().empty()) {
    SUCCEED("this machine has 8+ GPUs: every replica started on GPU 7");
    return;
  }
  CHECK(host.models().empty());  // a model with no replica is not served
  REQUIRE(host.failed_replicas().size() == 4);
  for (const FailedReplica& f : host.failed_replicas()) {
    INFO(f.id << ": " << f.error);
    CHECK(f.device == 7);
    CHECK(f.backend == "cuda");
    CHECK(f.error.find("FAILED_PRECONDITION") == 0);
    CHECK(f.id.find("01234567/" + std::string(kBundledModelName)) == 0);
  }
  CHECK(host.failed_replicas()[2].version == "v2");
}

TEST_CASE("a model directory that cannot be read still fails the start, naming it", "[node]") {
  InferenceOptions o;
  o.models = {"/nonexistent/model"};
  o.backend = "cpu";
  ReplicaHost host("node", o);
  absl::Status s = host.Start();
  CHECK_FALSE(s.ok());
  CHECK(std::string(s.message()).find("/nonexistent/model") != std::string::npos);
}

}  // namespace
}  // namespace exa::node
