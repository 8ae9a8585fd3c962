// The memory planner reproduces docs/architecture.md#memory-arithmetic's arithmetic for Llama-2-13B
// FP16 and agrees with the placement fit on replicas per node.
#include <catch2/catch.hpp>

#include "scheduler/device_fit.h"
#include "scheduler/memory_planner.h"
#include "scheduler/spec.h"

namespace exa::scheduler {
namespace {

constexpr uint64_t kGi = uint64_t{1} << 30;

PlanInput Llama13b() {
  PlanInput in;
  in.model = *PresetModel("llama-2-13b");
  in.gpu_memory_bytes = 80 * kGi;
  in.gpus_per_node = 8;
  return in;
}

TEST_CASE(
    "Llama-2-13B FP16, context 4096 x concurrency 4 on 8 x 80Gi: "
    "docs/architecture.md#memory-arithmetic") {
  auto plan = PlanMemory(Llama13b());
  REQUIRE(plan.ok());
  CHECK(plan->weight_bytes / 1e9 == Approx(26.0).margin(0.1));
  CHECK(plan->kv_bytes_per_token / 1e6 == Approx(0.8).margin(0.03));
  CHECK(plan->kv_bytes / 1e9 == Approx(13.0).margin(0.5));
  CHECK(plan->replica_bytes / 1e9 == Approx(53.0).margin(0.5));
  CHECK(plan->replicas_per_node == 12);
  CHECK(plan->replicas_per_node_pooled == 12);
  // The terms add up to the reservation.
  CHECK(plan->weight_bytes + plan->kv_bytes + plan->runtime_bytes + plan->fragmentation_bytes +
            plan->headroom_bytes ==
        plan->replica_bytes);
  CHECK(plan->headroom_bytes == Approx(0.15 * plan->replica_bytes).epsilon(0.01));
}

TEST_CASE("More headroom or context means more memory and fewer replicas") {
  PlanInput in = Llama13b();
  in.headroom = 0.3;
  auto tight = PlanMemory(in);
  REQUIRE(tight.ok());
  CHECK(tight->replicas_per_node < 12);
  in = Llama13b();
  in.context = 8192;
  auto longer = PlanMemory(in);
  REQUIRE(longer.ok());
  CHECK(longer->kv_bytes == 2 * PlanMemory(Llama13b())->kv_bytes);
}

TEST_CASE("Grouped-query attention shrinks the KV cache by the head ratio") {
  PlanInput in = Llama13b();
  in.model = *PresetModel("llama-2-70b");  // 64 heads, 8 KV heads
  in.gpus_per_replica = 2;
  auto plan = PlanMemory(in);
  REQUIRE(plan.ok());
  CHECK(plan->kv_bytes_per_token == 2ull * 80 * 8 * 128 * 2);
}

TEST_CASE("Bad planner input is refused") {
  PlanInput in = Llama13b();
  in.headroom = 0.7;
  CHECK(PlanMemory(in).status().code() == absl::StatusCode::kInvalidArgument);
  in = Llama13b();
  in.gpu_memory_bytes = 16 * kGi;  // one GPU holds less than a replica, and shards too
  in.gpus_per_node = 2;
  auto plan = PlanMemory(in);
  CHECK(plan.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_FALSE(ParsePrecision("fp12").ok());
  CHECK(*ParsePrecision("bfloat16") == Precision::kBf16);
}

TEST_CASE("Specs get the planner's reservation, and one below it is refused") {
  ModelCatalog catalog = ModelCatalog::WithPresets();
  InferenceReplicaSpec spec;
  spec.name = "x";
  spec.model = "llama-13b";
  spec.replicas = 1;
  auto bytes = ReplicaBytesForSpec(spec, catalog);
  REQUIRE(bytes.ok());
  CHECK(*bytes / 1e9 == Approx(53.0).margin(0.5));
  spec.resources.memory_bytes = 53 * kGi;
  CHECK(*ReplicaBytesForSpec(spec, catalog) == 53 * kGi);
  spec.resources.memory_bytes = 40 * kGi;
  CHECK(ReplicaBytesForSpec(spec, catalog).status().message().find("below the planner's") !=
        absl::string_view::npos);
  spec.model = "gpt-7";
  CHECK(ReplicaBytesForSpec(spec, catalog).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("Device fit: whole GPUs first, then shards over NVLink fragments") {
  std::vector<GpuFree> gpus(8, GpuFree{80 * kGi, 0});
  auto fit = FitReplica(gpus, 53 * kGi, 1, false);
  REQUIRE(fit);
  CHECK(fit->gpus.size() == 1);
  for (auto& g : gpus) g.free_bytes = 27 * kGi;
  fit = FitReplica(gpus, 53 * kGi, 1, false);
  REQUIRE(fit);
  CHECK(fit->gpus.size() == 2);
  CHECK(fit->bytes_per_gpu == Approx(26.5 * kGi).margin(1));
  // Two GPUs with room, but in different NVLink domains.
  std::vector<GpuFree> split = {{27 * kGi, 0}, {27 * kGi, 1}};
  CHECK_FALSE(FitReplica(split, 53 * kGi, 1, false));
  fit = FitReplica(split, 53 * kGi, 1, true);
  REQUIRE(fit);
  CHECK_FALSE(fit->same_domain);
  CHECK(ReplicasPerEmptyNode(80 * kGi, 8, 53 * kGi, 1) == 12);
  CHECK(ReplicasPerEmptyNode(80 * kGi, 8, 81 * kGi, 1) == 7);  // shards of 2, 4, then 8 GPUs
}

}  // namespace
}  // namespace exa::scheduler
