// Placement: which node and GPUs each new replica of a deployment gets. Pure
// and deterministic: the same nodes, ledger and request give the same answer on every
// scheduler, so two reconcilers acting at once pick the same targets.
//
// Rules, in order:
//   - eligibility: a node that is cordoned, tainted (burn-in failures taint,
//   docs/architecture.md#bring-up),
//     reports an inventory that contradicts itself, or holds a control role (scheduler, gateway,
//     storage, observer: docs/architecture.md#roles role purity) gets no replicas. Role purity is
//     relaxed in small clusters (PlacementOptions) so one 8-GPU machine still serves
//     (docs/architecture.md#small-clusters);
//   - memory: device_fit.h on the node's free memory per GPU (inventory − ledger), the same fit
//     the memory planner uses, so the plan and the placement agree;
//   - topology: preferSameNVLinkDomain keeps a sharded replica inside one NVLink domain (or the
//     node is skipped); preferSameRack groups a deployment's replicas into as few racks as
//     possible; otherwise replicas spread over racks, then nodes, for availability, except an
//     autoscaled deployment's elastic replicas (PlacementRequest::pack_last), which spread over
//     racks and fill the nodes holding most of the deployment first, so that a scale-down
//     (highest ordinals first) empties whole nodes (docs/architecture.md#autoscaling);
//   - ties: best fit (least memory left over on the chosen GPUs), then node id.
// A replica that cannot be placed gets an explanation counting nodes by reason.
//
// Thread safety: pure functions; MemoryLedger is a value type with no locking.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "cluster/role.h"
#include "scheduler/spec.h"

namespace exa::scheduler {

struct GpuDevice {
  uint64_t memory_bytes = 0;
  std::string nvlink_domain;
  bool operator==(const GpuDevice&) const = default;
};

// What a node reports at registration (docs/architecture.md#bring-up): GPUs, their memory and
// NVLink topology.
struct NodeInventory {
  std::string id;
  std::string rack;
  cluster::RoleSet roles;  // the roles it holds now
  std::vector<GpuDevice> gpus;
  std::vector<std::string> taints;
  bool cordoned = false;
  // Drained by an operator (`exaserve-cli node drain`): cordoned, and its replicas move away.
  bool draining = false;
  // What its devices are: "gpu", or "cpu" for a node whose cpu/sim replicas draw on a host
  // memory budget, offered as one device (gossip's GPU summary with model "cpu").
  std::string device_kind = "gpu";
};

// Bounds a self-report must respect: one node with more than this is lying or broken.
inline constexpr size_t kMaxGpusPerNode = 64;
inline constexpr uint64_t kMaxGpuMemoryBytes = uint64_t{4} << 40;  // 4 TiB

// INVALID_ARGUMENT naming the node and the contradiction (no GPUs is valid: a CPU-only node).
absl::Status ValidateInventory(const NodeInventory& node);

// A replica's place: node, GPUs (indices into the node's inventory) and bytes on each.
struct Allocation {
  std::string node;
  std::vector<int> gpus;
  uint64_t bytes_per_gpu = 0;
  bool operator==(const Allocation&) const = default;
};

// GPU memory already reserved, per node and GPU.
class MemoryLedger {
 public:
  void Reserve(const Allocation& a);
  void Release(const Allocation& a);
  uint64_t Used(const std::string& node, int gpu) const;
  uint64_t TotalUsed() const;

 private:
  absl::flat_hash_map<std::string, std::vector<uint64_t>> used_;  // node → per GPU
};

struct PlacementOptions {
  bool role_purity = true;
  // Role purity applies only above this many nodes; a small cluster puts replicas on its
  // control nodes too (docs/architecture.md#small-clusters: the same design on one 8-GPU machine).
  int small_cluster_max_nodes = 4;
};

struct PlacementRequest {
  std::string deployment;
  int count = 0;  // replicas to place
  uint64_t replica_bytes = 0;
  int min_gpus = 1;
  std::string device_kind = "gpu";  // DeviceKindForBackend(spec.backend)
  TopologySpec topology;
  // The deployment's replicas already running, per node id (for spreading or grouping).
  std::map<std::string, int> existing_per_node;
  // Nodes not to use (a surge copy goes beside the replica it replaces, not onto its node).
  std::set<std::string> avoid_nodes;
  // Nodes that hold the deployment's weights: preferred among nodes equal for spreading.
  std::set<std::string> staged_nodes;
  // The last pack_last of the `count` replicas are elastic (an autoscaled deployment's ordinals
  // at or above minReplicas): each goes to the node holding most of the deployment in its rack
  // rather than the fewest. No effect with preferSameRack, which groups already.
  int pack_last = 0;
};

struct PlacementResult {
  std::vector<Allocation> placed;  // in placement order
  int unplaced = 0;
  std::string reason;  // why the rest could not be placed; empty when all were
};

// "gpu" for the cuda backend, "cpu" for cpu and sim: the devices a replica draws memory from.
std::string DeviceKindForBackend(const std::string& backend);

// Places up to request.count replicas on `nodes`, reserving them in `ledger` as it goes.
PlacementResult Place(const std::vector<NodeInventory>& nodes, MemoryLedger& ledger,
                      const PlacementRequest& request, const PlacementOptions& options);

// Fraction of a deployment's `allocations` that meet its topology preferences: every shard in
// one NVLink domain when preferSameNVLinkDomain; when preferSameRack, in the fewest racks that
// could hold them all (racks by capacity for this replica size when empty; those holding most of
// the deployment count). 1 when there is nothing to judge.
double TopologySatisfied(const std::vector<NodeInventory>& nodes,
                         const std::vector<Allocation>& allocations, const TopologySpec& topology,
                         uint64_t replica_bytes, int min_gpus);

}  // namespace exa::scheduler
