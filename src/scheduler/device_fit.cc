#include "scheduler/device_fit.h"

#include <algorithm>

namespace exa::scheduler {
namespace {

// The `k` GPUs among `candidates` with the least free memory (best fit), ties by index.
DeviceFit Choose(std::span<const GpuFree> gpus, std::vector<int> candidates, int k,
                 uint64_t per_gpu, bool same_domain) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](int a, int b) { return gpus[a].free_bytes < gpus[b].free_bytes; });
  candidates.resize(k);
  std::sort(candidates.begin(), candidates.end());
  DeviceFit fit{candidates, per_gpu, same_domain, 0};
  for (int i : candidates) fit.leftover_bytes += gpus[i].free_bytes - per_gpu;
  return fit;
}

std::optional<DeviceFit> FitInOneDomain(std::span<const GpuFree> gpus, int k, uint64_t per_gpu) {
  std::optional<DeviceFit> best;
  std::vector<int> domains;
  for (const GpuFree& g : gpus) {
    if (std::find(domains.begin(), domains.end(), g.domain) == domains.end()) {
      domains.push_back(g.domain);
    }
  }
  for (int d : domains) {
    std::vector<int> candidates;
    for (int i = 0; i < static_cast<int>(gpus.size()); ++i) {
      if (gpus[i].domain == d && gpus[i].free_bytes >= per_gpu) candidates.push_back(i);
    }
    if (static_cast<int>(candidates.size()) < k) continue;
    DeviceFit fit = Choose(gpus, std::move(candidates), k, per_gpu, true);
    if (!best || fit.leftover_bytes < best->leftover_bytes ||
        (fit.leftover_bytes == best->leftover_bytes && fit.gpus < best->gpus)) {
      best = std::move(fit);
    }
  }
  return best;
}

}  // namespace

std::optional<DeviceFit> FitReplica(std::span<const GpuFree> gpus, uint64_t replica_bytes,
                                    int min_gpus, bool allow_cross_domain) {
  const int n = static_cast<int>(gpus.size());
  if (min_gpus < 1 || min_gpus > n || replica_bytes == 0) return std::nullopt;
  for (int k = min_gpus; k <= n; k *= 2) {
    uint64_t per_gpu = (replica_bytes + k - 1) / k;
    if (auto fit = FitInOneDomain(gpus, k, per_gpu)) return fit;
  }
  if (!allow_cross_domain) return std::nullopt;
  for (int k = min_gpus; k <= n; k *= 2) {
    uint64_t per_gpu = (replica_bytes + k - 1) / k;
    std::vector<int> candidates;
    for (int i = 0; i < n; ++i) {
      if (gpus[i].free_bytes >= per_gpu) candidates.push_back(i);
    }
    if (static_cast<int>(candidates.size()) >= k) {
      return Choose(gpus, std::move(candidates), k, per_gpu, false);
    }
  }
  return std::nullopt;
}

int ReplicasPerEmptyNode(uint64_t gpu_bytes, int gpus_per_node, uint64_t replica_bytes,
                         int min_gpus) {
  std::vector<GpuFree> gpus(std::max(0, gpus_per_node), GpuFree{gpu_bytes, 0});
  int count = 0;
  while (auto fit = FitReplica(gpus, replica_bytes, min_gpus, false)) {
    for (int i : fit->gpus) gpus[i].free_bytes -= fit->bytes_per_gpu;
    ++count;
  }
  return count;
}

}  // namespace exa::scheduler
