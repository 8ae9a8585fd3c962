// This node's GPUs at start (docs/architecture.md#cold-start and docs/architecture.md#bring-up):
// the inventory, summarised into the gossip metadata the scheduler places by, and the CUDA context
// warm-up on every device, timed and exported, so the first request on a replica pays none of it.
//
// Thread safety: call from the daemon's start-up thread.
#pragma once

#include <string>
#include <vector>

#include "engine/cuda/gpu.h"
#include "membership/member.h"
#include "metrics/registry.h"
#include "nlohmann/json.hpp"

namespace exa::daemon {

struct GpuNode {
  engine::cuda::GpuInventory inventory;
  absl::Status warm_up;  // not OK when a device failed to warm up (the node keeps starting)
  // The last burn-in (at start when inference.burn_in, or `exaserve-cli node burn-in`).
  std::vector<engine::cuda::BurnInResult> burn_in;
  // Why the last burn-in failed (a device below its class, or the test itself failing); empty
  // when it passed or never ran. A failing node is tainted kBurnInFailedTaint: no replicas.
  std::string burn_in_failure;
  // exaserve_gpu_burn_in_passed{device}, registered once by PrepareGpus (burn-ins repeat).
  metrics::Family<metrics::Gauge>* burn_in_gauge = nullptr;
};

inline constexpr char kBurnInFailedTaint[] = "burn-in-failed";

// Runs the burn-in on every GPU into `node` and sets exaserve_gpu_burn_in_passed{device}; may run
// again (exaserve-cli node burn-in). Returns whether every device passed; a node without GPUs
// passes trivially (nothing to test).
bool RunNodeBurnIn(GpuNode& node);

// The JSON of `node`'s last burn-in: {"burn_in": [...], "passed": bool, "failure": "..."}.
nlohmann::json BurnInJson(const GpuNode& node);

// Discovers the GPUs (an empty inventory without a driver), warms each one up, and registers
// exaserve_gpus, exaserve_gpu_warm_up_seconds{device} and exaserve_gpu_burn_in_passed{device}.
// Never fails: a broken GPU shows in the warm-up status, the log and the metrics, and its replicas
// fail on their own.
GpuNode PrepareGpus(metrics::Registry& registry);

// Fills metadata.gpus (count, smallest memory, class name such as "H100-SXM"), the NVLink domain
// ("nvl8": device 0's NVLink group has 8 GPUs; empty without NVLink) and the burn-in taint from
// `node`. Pure; stays within the
// gossip metadata budget (the class name is at most 32 bytes).
void PublishGpus(const GpuNode& node, membership::Metadata* metadata);

}  // namespace exa::daemon
