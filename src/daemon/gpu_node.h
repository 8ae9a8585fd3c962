// This node's GPUs at start (issue #5, MISSION.md §5 and §8): the inventory, summarised into the
// gossip metadata the scheduler places by, and the CUDA context warm-up on every device, timed
// and exported, so the first request on a replica pays none of it.
//
// Thread safety: call from the daemon's start-up thread.
#pragma once

#include "engine/cuda/gpu.h"
#include "membership/member.h"
#include "metrics/registry.h"

namespace exa::daemon {

struct GpuNode {
  engine::cuda::GpuInventory inventory;
  absl::Status warm_up;  // not OK when a device failed to warm up (the node keeps starting)
};

// Discovers the GPUs (an empty inventory without a driver), warms each one up, and registers
// exaserve_gpus and exaserve_gpu_warm_up_seconds{device}. Never fails: a broken GPU shows in
// the warm-up status, the log and the metrics, and its replicas fail on their own.
GpuNode PrepareGpus(metrics::Registry& registry);

// Fills metadata.gpus (count, smallest memory, class name such as "H100-SXM") from `inventory`.
// Pure; stays within the gossip metadata budget (the class name is at most 32 bytes).
void PublishGpus(const engine::cuda::GpuInventory& inventory, membership::Metadata* metadata);

}  // namespace exa::daemon
