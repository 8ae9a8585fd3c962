// Where on one node a replica's GPU memory goes: the fit both the memory planner (replicas per
// node) and placement use, so a plan and a placement never disagree.
//
// A replica asks for `replica_bytes` on at least `min_gpus` GPUs. When no set of `min_gpus`
// GPUs has room, it may be sharded evenly (tensor parallel) over 2×, 4×, … as many GPUs, which is
// how docs/architecture.md#memory-arithmetic fits 12 replicas of 53 GB on 8 × 80 GB: eight replicas
// on one GPU each, four more each over the 27 GB left on two GPUs. Shards of one replica stay
// inside one NVLink domain when possible (tensor parallelism across PCIe is slow);
// `allow_cross_domain` permits the rest.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace exa::scheduler {

struct GpuFree {
  uint64_t free_bytes = 0;
  int domain = 0;  // NVLink domain, as a small index within the node
};

struct DeviceFit {
  std::vector<int> gpus;  // indices into the span given to FitReplica, ascending
  uint64_t bytes_per_gpu = 0;
  bool same_domain = true;
  uint64_t leftover_bytes = 0;  // free bytes left on the chosen GPUs
};

// The best fit: inside one NVLink domain if any shard count allows it, then fewest GPUs, then
// least memory left over on the chosen GPUs (best fit keeps whole GPUs free for later
// replicas), then lowest indices.
// nullopt when the replica cannot go on this node.
std::optional<DeviceFit> FitReplica(std::span<const GpuFree> gpus, uint64_t replica_bytes,
                                    int min_gpus, bool allow_cross_domain);

// How many replicas fit on an empty node of `gpus_per_node` GPUs of `gpu_bytes` each, all in
// one NVLink domain, placing them one by one with FitReplica.
int ReplicasPerEmptyNode(uint64_t gpu_bytes, int gpus_per_node, uint64_t replica_bytes,
                         int min_gpus);

}  // namespace exa::scheduler
