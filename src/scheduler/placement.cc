#include "scheduler/placement.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "common/strings.h"
#include "common/units.h"
#include "scheduler/device_fit.h"

namespace exa::scheduler {
namespace {

enum class Ineligible {
  kNone,
  kInvalid,
  kCordoned,
  kTainted,
  kControlRole,
  kNoGpus,
  kDeviceKind,
  kAvoided
};

struct NodeState {
  const NodeInventory* inventory = nullptr;
  int rack = 0;
  Ineligible why = Ineligible::kNone;
  std::vector<GpuFree> free;
  bool fit_valid = false;
  std::optional<DeviceFit> fit;
  int deployment_count = 0;
  int unstaged = 1;  // 0 when the node holds the deployment's weights (starts without a pull)
};

std::vector<GpuFree> FreeMemory(const NodeInventory& node, const MemoryLedger& ledger) {
  std::vector<std::string> domains;
  std::vector<GpuFree> free;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuDevice& g = node.gpus[i];
    auto it = std::find(domains.begin(), domains.end(), g.nvlink_domain);
    int domain = static_cast<int>(it - domains.begin());
    if (it == domains.end()) domains.push_back(g.nvlink_domain);
    uint64_t used = ledger.Used(node.id, static_cast<int>(i));
    free.push_back(GpuFree{g.memory_bytes > used ? g.memory_bytes - used : 0, domain});
  }
  return free;
}

Ineligible Classify(const NodeInventory& node, const PlacementRequest& request, bool role_purity) {
  if (!ValidateInventory(node).ok()) return Ineligible::kInvalid;
  if (node.cordoned || node.draining) return Ineligible::kCordoned;
  if (!node.taints.empty()) return Ineligible::kTainted;
  if (role_purity && node.roles.HasControlRole()) return Ineligible::kControlRole;
  if (node.gpus.empty()) return Ineligible::kNoGpus;
  if (node.device_kind != request.device_kind) return Ineligible::kDeviceKind;
  if (request.avoid_nodes.count(node.id) > 0) return Ineligible::kAvoided;
  return Ineligible::kNone;
}

// "of 256 nodes, 240 lack free GPU memory (most free: 27Gi on one GPU, 54Gi in one NVLink
// domain), 11 hold a control role (role purity), 5 are tainted (burn-in-failed)".
std::string Explain(const std::vector<NodeState>& states, const PlacementRequest& request,
                    bool allow_cross_domain) {
  int counts[8] = {};
  int too_small = 0;
  uint64_t most_gpu = 0, most_domain = 0;
  std::set<std::string> taints;
  std::string invalid;
  for (const NodeState& s : states) {
    counts[static_cast<int>(s.why)]++;
    if (s.why == Ineligible::kTainted) {
      for (const std::string& t : s.inventory->taints) taints.insert(t);
    }
    if (s.why == Ineligible::kInvalid && invalid.empty()) {
      invalid = ToStd(ValidateInventory(*s.inventory).message());
    }
    if (s.why != Ineligible::kNone) continue;
    std::vector<GpuFree> empty = s.free;
    for (size_t i = 0; i < empty.size(); ++i)
      empty[i].free_bytes = s.inventory->gpus[i].memory_bytes;
    if (!FitReplica(empty, request.replica_bytes, request.min_gpus, allow_cross_domain)) {
      too_small++;
      continue;
    }
    std::map<int, uint64_t> per_domain;
    for (const GpuFree& g : s.free) {
      most_gpu = std::max(most_gpu, g.free_bytes);
      per_domain[g.domain] += g.free_bytes;
    }
    for (const auto& [d, bytes] : per_domain) most_domain = std::max(most_domain, bytes);
  }
  int full = counts[0] - too_small;
  std::string out = StrCat("of ", states.size(), " nodes");
  auto add = [&out](int n, const std::string& what) {
    if (n > 0) StrAppend(&out, ", ", n, " ", what);
  };
  add(full, StrCat("lack free GPU memory (most free: ", BytesToString(most_gpu), " on one GPU, ",
                   BytesToString(most_domain), " in one NVLink domain)"));
  add(too_small, StrCat("are too small even when empty (", request.min_gpus == 1 ? "" : "≥ ",
                        request.min_gpus, " GPU", request.min_gpus == 1 ? "" : "s",
                        allow_cross_domain ? "" : " in one NVLink domain", ")"));
  add(counts[static_cast<int>(Ineligible::kControlRole)], "hold a control role (role purity)");
  add(counts[static_cast<int>(Ineligible::kCordoned)], "are cordoned");
  std::string taint_list;
  for (const std::string& t : taints) StrAppend(&taint_list, taint_list.empty() ? "" : ", ", t);
  add(counts[static_cast<int>(Ineligible::kTainted)], StrCat("are tainted (", taint_list, ")"));
  add(counts[static_cast<int>(Ineligible::kNoGpus)], "have no GPUs");
  add(counts[static_cast<int>(Ineligible::kAvoided)], "hold the replica it replaces");
  add(counts[static_cast<int>(Ineligible::kDeviceKind)],
      StrCat("offer no ", request.device_kind, " devices (their replicas run on another backend)"));
  add(counts[static_cast<int>(Ineligible::kInvalid)],
      StrCat("report an inconsistent inventory (", invalid, ")"));
  if (states.empty()) out = "no nodes are known";
  return out;
}

}  // namespace

absl::Status ValidateInventory(const NodeInventory& node) {
  if (node.id.empty()) return absl::InvalidArgumentError("node inventory: empty node id");
  if (node.gpus.size() > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(StrCat("node ", node.id, " reports ", node.gpus.size(),
                                             " GPUs, more than ", kMaxGpusPerNode));
  }
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuDevice& g = node.gpus[i];
    if (g.memory_bytes == 0 || g.memory_bytes > kMaxGpuMemoryBytes) {
      return absl::InvalidArgumentError(
          StrCat("node ", node.id, " GPU ", i, " reports ", BytesToString(g.memory_bytes),
                 " of memory; expected 1 byte to ", BytesToString(kMaxGpuMemoryBytes)));
    }
    if (g.nvlink_domain.empty()) {
      return absl::InvalidArgumentError(
          StrCat("node ", node.id, " GPU ", i, " reports no NVLink domain"));
    }
  }
  return absl::OkStatus();
}

void MemoryLedger::Reserve(const Allocation& a) {
  std::vector<uint64_t>& used = used_[a.node];
  for (int g : a.gpus) {
    if (static_cast<size_t>(g) >= used.size()) used.resize(g + 1, 0);
    used[g] += a.bytes_per_gpu;
  }
}

void MemoryLedger::Release(const Allocation& a) {
  auto it = used_.find(a.node);
  if (it == used_.end()) return;
  for (int g : a.gpus) {
    if (static_cast<size_t>(g) < it->second.size()) {
      it->second[g] -= std::min(it->second[g], a.bytes_per_gpu);
    }
  }
}

uint64_t MemoryLedger::Used(const std::string& node, int gpu) const {
  auto it = used_.find(node);
  if (it == used_.end() || gpu < 0 || static_cast<size_t>(gpu) >= it->second.size()) return 0;
  return it->second[gpu];
}

uint64_t MemoryLedger::TotalUsed() const {
  uint64_t total = 0;
  for (const auto& [node, used] : used_) {
    for (uint64_t u : used) total += u;
  }
  return total;
}

std::string DeviceKindForBackend(const std::string& backend) {
  return backend == "cuda" ? "gpu" : "cpu";
}

PlacementResult Place(const std::vector<NodeInventory>& nodes, MemoryLedger& ledger,
                      const PlacementRequest& request, const PlacementOptions& options) {
  PlacementResult result;
  const bool purity =
      options.role_purity && static_cast<int>(nodes.size()) > options.small_cluster_max_nodes;
  const bool cross = !request.topology.prefer_same_nvlink_domain;
  std::unordered_map<std::string, int> rack_index;
  std::vector<NodeState> states(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodeState& s = states[i];
    s.inventory = &nodes[i];
    s.rack = rack_index.emplace(nodes[i].rack, static_cast<int>(rack_index.size())).first->second;
    s.why = Classify(nodes[i], request, purity);
    if (s.why == Ineligible::kNone) s.free = FreeMemory(nodes[i], ledger);
    auto it = request.existing_per_node.find(nodes[i].id);
    s.deployment_count = it == request.existing_per_node.end() ? 0 : it->second;
    s.unstaged = request.staged_nodes.count(nodes[i].id) > 0 ? 0 : 1;
  }
  std::vector<int> rack_count(rack_index.size(), 0);
  for (const NodeState& s : states) rack_count[s.rack] += s.deployment_count;

  const bool group = request.topology.prefer_same_rack;
  for (int placed = 0; placed < request.count; ++placed) {
    const bool pack = placed >= request.count - request.pack_last;
    // Smaller is better (staged nodes among those equal for spreading; the id breaks ties).
    using Key = std::tuple<int, int, size_t, uint64_t, std::string_view>;
    std::optional<Key> best_key;
    int best = -1;
    for (size_t i = 0; i < states.size(); ++i) {
      NodeState& s = states[i];
      if (s.why != Ineligible::kNone) continue;
      if (!s.fit_valid) {
        s.fit = FitReplica(s.free, request.replica_bytes, request.min_gpus, cross);
        s.fit_valid = true;
      }
      if (!s.fit) continue;
      // Grouping: the fullest rack. Otherwise the emptiest rack, and in it the node with the
      // fewest replicas of the deployment, or the most for an elastic replica (pack).
      const int on_node = pack ? -s.deployment_count : s.deployment_count;
      Key key = group ? Key{-rack_count[s.rack], s.unstaged, s.fit->gpus.size(),
                            s.fit->leftover_bytes, s.inventory->id}
                      : Key{rack_count[s.rack], 2 * on_node + s.unstaged, s.fit->gpus.size(),
                            s.fit->leftover_bytes, s.inventory->id};
      if (!best_key || key < *best_key) {
        best_key = key;
        best = static_cast<int>(i);
      }
    }
    if (best < 0) {
      result.unplaced = request.count - placed;
      result.reason =
          StrCat("cannot place ", result.unplaced, " of ", request.count, " replicas of ",
                 request.deployment, " (", BytesToString(request.replica_bytes), " on ≥ ",
                 request.min_gpus, " GPU", request.min_gpus == 1 ? "" : "s",
                 "): ", Explain(states, request, cross));
      break;
    }
    NodeState& s = states[best];
    Allocation a{s.inventory->id, s.fit->gpus, s.fit->bytes_per_gpu};
    for (int g : a.gpus) s.free[g].free_bytes -= a.bytes_per_gpu;
    s.fit_valid = false;
    s.deployment_count++;
    rack_count[s.rack]++;
    ledger.Reserve(a);
    result.placed.push_back(std::move(a));
  }
  return result;
}

double TopologySatisfied(const std::vector<NodeInventory>& nodes,
                         const std::vector<Allocation>& allocations, const TopologySpec& topology,
                         uint64_t replica_bytes, int min_gpus) {
  if (allocations.empty()) return 1.0;
  std::unordered_map<std::string, const NodeInventory*> by_id;
  for (const NodeInventory& n : nodes) by_id[n.id] = &n;
  std::map<std::string, int> per_rack;
  std::vector<bool> ok(allocations.size(), true);
  for (size_t i = 0; i < allocations.size(); ++i) {
    const Allocation& a = allocations[i];
    auto it = by_id.find(a.node);
    if (it == by_id.end()) {
      ok[i] = false;
      continue;
    }
    const NodeInventory& n = *it->second;
    per_rack[n.rack]++;
    if (!topology.prefer_same_nvlink_domain) continue;
    for (int g : a.gpus) {
      if (g < 0 || static_cast<size_t>(g) >= n.gpus.size() ||
          n.gpus[g].nvlink_domain != n.gpus[a.gpus.front()].nvlink_domain) {
        ok[i] = false;
      }
    }
  }
  std::set<std::string> good_racks;
  if (topology.prefer_same_rack && !per_rack.empty()) {
    // How many replicas each rack could hold empty, and so the fewest racks that hold them all.
    std::map<std::string, int64_t> capacity;
    for (const NodeInventory& n : nodes) {
      std::vector<GpuFree> gpus;
      std::vector<std::string> domains;
      for (const GpuDevice& g : n.gpus) {
        auto d = std::find(domains.begin(), domains.end(), g.nvlink_domain);
        gpus.push_back(GpuFree{g.memory_bytes, static_cast<int>(d - domains.begin())});
        if (d == domains.end()) domains.push_back(g.nvlink_domain);
      }
      while (auto fit =
                 FitReplica(gpus, replica_bytes, min_gpus, !topology.prefer_same_nvlink_domain)) {
        for (int g : fit->gpus) gpus[g].free_bytes -= fit->bytes_per_gpu;
        capacity[n.rack]++;
      }
    }
    std::vector<int64_t> sizes;
    for (const auto& [rack, c] : capacity) sizes.push_back(c);
    std::sort(sizes.rbegin(), sizes.rend());
    size_t needed = 0;
    for (int64_t held = 0; needed < sizes.size() && held < static_cast<int64_t>(allocations.size());
         ++needed) {
      held += sizes[needed];
    }
    std::vector<std::pair<int, std::string>> racks;
    for (const auto& [rack, count] : per_rack) racks.emplace_back(-count, rack);
    std::sort(racks.begin(), racks.end());
    for (size_t i = 0; i < std::max<size_t>(needed, 1) && i < racks.size(); ++i) {
      good_racks.insert(racks[i].second);
    }
  }
  size_t satisfied = 0;
  for (size_t i = 0; i < allocations.size(); ++i) {
    if (!ok[i]) continue;
    if (topology.prefer_same_rack && !good_racks.count(by_id[allocations[i].node]->rack)) continue;
    satisfied++;
  }
  return static_cast<double>(satisfied) / allocations.size();
}

}  // namespace exa::scheduler
