// The CUDA backend's host-side contracts, checked on any machine (no GPU needed): the cuda
// backend fails cleanly where it cannot run, the inventory is empty rather than an error without
// a driver, device classes are recognised, and the device pool's bookkeeping is exact.
#include <catch2/catch.hpp>

#include <filesystem>

#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/device_arena.h"
#include "engine/cuda/gpu.h"
#include "engine/engine.h"

namespace exa::engine::cuda {
namespace {

const std::string kTinyModel = std::string(EXA_SOURCE_DIR) + "/models/exa-tiny-arith";

bool HaveGpu() { return !DiscoverGpus().devices.empty(); }

TEST_CASE("backend cuda without a GPU is FAILED_PRECONDITION, not a crash", "[cuda]") {
  if (HaveGpu()) return;  // the [gpu] suite covers machines with a device
  EngineOptions o;
  o.model_dir = kTinyModel;
  o.backend = "cuda";
  auto engine = CreateEngine(o);
  REQUIRE_FALSE(engine.ok());
  CHECK(engine.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(engine.status().message()).find("cuda") != std::string::npos);
}

TEST_CASE("an unknown backend names the three that exist", "[cuda]") {
  EngineOptions o;
  o.model_dir = kTinyModel;
  o.backend = "rocm";
  auto engine = CreateEngine(o);
  REQUIRE(engine.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(engine.status().message()).find("cpu, cuda or sim") != std::string::npos);
}

TEST_CASE("without a device the inventory is empty and says why", "[cuda]") {
  const GpuInventory inv = DiscoverGpus();
  const nlohmann::json j = ToJson(inv);
  CHECK(j["count"] == inv.devices.size());
  if (inv.devices.empty()) {
    CHECK_FALSE(inv.note.empty());
    CHECK(j["devices"].empty());
    CHECK(WarmUpGpus().status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(RunBurnIn({}).status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(MeasureDeviceCopyBandwidth(0, 1 << 20).status().code() ==
          absl::StatusCode::kFailedPrecondition);
  }
}

TEST_CASE("burn-in classes come from the CUDA device name and memory", "[cuda]") {
  constexpr int64_t kGiB = int64_t{1} << 30;
  CHECK(ExpectedClass("NVIDIA H100 80GB HBM3", 80 * kGiB).name == "H100-SXM");
  CHECK(ExpectedClass("NVIDIA H100 PCIe", 80 * kGiB).name == "H100-PCIe");
  CHECK(ExpectedClass("NVIDIA H100 NVL", 94 * kGiB).name == "H100-NVL");
  CHECK(ExpectedClass("NVIDIA H200", 141 * kGiB).name == "H200");
  CHECK(ExpectedClass("NVIDIA A100-SXM4-80GB", 80 * kGiB).name == "A100-80GB");
  CHECK(ExpectedClass("NVIDIA A100-PCIE-40GB", 40 * kGiB).name == "A100-40GB");
  CHECK(ExpectedClass("NVIDIA L40S", 48 * kGiB).name == "L40S");
  const DeviceClass t4 = ExpectedClass("Tesla T4", 16 * kGiB);
  CHECK(t4.name == "unknown");
  CHECK(t4.min_gemm_tflops == 0);
  // A faster part never has a lower floor than a slower one of the same generation.
  CHECK(ExpectedClass("NVIDIA H200", 141 * kGiB).min_copy_bytes_per_s >
        ExpectedClass("NVIDIA H100 80GB HBM3", 80 * kGiB).min_copy_bytes_per_s);
  // The copy floor counts reads + writes against the bus's total: a healthy H200 measured
  // 4.25e12 bytes/s read + written (exaserved --burn-in on an H200, 2026-11-29) must pass.
  CHECK(ExpectedClass("NVIDIA H200", 141 * kGiB).min_copy_bytes_per_s < 0.75 * 4.25e12);
}

TEST_CASE("burn-in results serialise with their floors", "[cuda]") {
  BurnInResult r;
  r.device = 1;
  r.name = "NVIDIA H100 80GB HBM3";
  r.expected = ExpectedClass(r.name, int64_t{80} << 30);
  r.gemm_tflops = 100;
  r.passed = false;
  r.reason = "slow";
  const nlohmann::json j = ToJson(std::vector<BurnInResult>{r});
  REQUIRE(j.size() == 1);
  CHECK(j[0]["class"] == "H100-SXM");
  CHECK(j[0]["min_gemm_tflops"].get<double>() == r.expected.min_gemm_tflops);
  CHECK(j[0]["passed"] == false);
}

TEST_CASE("the device arena aligns every buffer and refuses to overflow", "[cuda]") {
  DeviceArena arena(0x10000, 4096);
  auto a = arena.Take(10, "a");
  auto b = arena.Take(300, "b");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == 0x10000);
  CHECK(*b == 0x10000 + DeviceArena::kAlignment);
  CHECK(*b % DeviceArena::kAlignment == 0);
  CHECK(arena.used_bytes() == 3 * DeviceArena::kAlignment);
  auto big = arena.Take(4096, "KV cache");
  REQUIRE_FALSE(big.ok());
  CHECK(big.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(big.status().message()).find("KV cache") != std::string::npos);
  CHECK(arena.used_bytes() == 3 * DeviceArena::kAlignment);  // a refusal takes nothing
  CHECK(arena.Take(4096 - 3 * DeviceArena::kAlignment, "rest").ok());
  CHECK(arena.Take(-1, "negative").status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace exa::engine::cuda
