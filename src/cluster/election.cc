#include "cluster/election.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string_view>

namespace exa::cluster {
namespace {

// FNV-1a then the splitmix64 finalizer: stable across builds and platforms (std::hash is not),
// so nodes running different builds still agree.
uint64_t StableHash(std::string_view a, std::string_view b) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ULL;
    }
  };
  mix(a);
  mix("/");
  mix(b);
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBULL;
  h ^= h >> 31;
  return h;
}

struct Candidate {
  const ElectionNode* node;
  uint64_t score;
};

class Election {
 public:
  Election(const std::vector<ElectionNode>& nodes, const ElectionConfig& config)
      : nodes_(nodes), config_(config) {
    for (const ElectionNode& n : nodes_) {
      racks_.insert(n.rack);
      if (!n.pinned.empty()) out_[n.id] = n.pinned;
    }
  }

  Assignment Run() {
    if (nodes_.size() == 1 && nodes_[0].pinned.empty()) {
      out_[nodes_[0].id] = RoleSet::All();
      return out_;
    }
    for (const std::string& rack : racks_) FillStorage(rack);
    Fill(Role::kScheduler, SchedulerTarget(nodes_.size(), config_));
    Fill(Role::kGateway, GatewayTarget(nodes_.size(), config_));
    Fill(Role::kObserver, ObserverTarget(nodes_.size(), config_));
    bool any_inference = false;
    for (const ElectionNode& n : nodes_) {
      if (n.pinned.empty() && !out_[n.id].HasControlRole()) out_[n.id].Add(Role::kInference);
      if (out_[n.id].Has(Role::kInference)) any_inference = true;
    }
    if (!any_inference) {
      for (const ElectionNode& n : nodes_) {
        if (n.pinned.empty()) out_[n.id].Add(Role::kInference);
      }
    }
    return out_;
  }

 private:
  bool Free(const ElectionNode& n) const {
    auto it = out_.find(n.id);
    return n.pinned.empty() && (it == out_.end() || !it->second.HasControlRole());
  }

  // Auto nodes of `rack` (all racks when null) that may take `role`, best first; free nodes
  // come before nodes that already hold a control role.
  std::vector<Candidate> Candidates(Role role, const std::string* rack) const {
    std::vector<Candidate> out;
    for (const ElectionNode& n : nodes_) {
      if (!n.pinned.empty() || (rack != nullptr && n.rack != *rack)) continue;
      auto it = out_.find(n.id);
      if (it != out_.end() && it->second.Has(role)) continue;
      out.push_back(Candidate{&n, StableHash(RoleName(role), n.id)});
    }
    std::sort(out.begin(), out.end(), [this](const Candidate& a, const Candidate& b) {
      bool fa = Free(*a.node), fb = Free(*b.node);
      if (fa != fb) return fa;
      if (a.score != b.score) return a.score > b.score;
      return a.node->id < b.node->id;
    });
    return out;
  }

  int Holders(Role role, const std::string* rack) const {
    int count = 0;
    for (const ElectionNode& n : nodes_) {
      if (rack != nullptr && n.rack != *rack) continue;
      auto it = out_.find(n.id);
      if (it != out_.end() && it->second.Has(role)) count++;
    }
    return count;
  }

  void FillStorage(const std::string& rack) {
    int need = config_.storage_per_rack - Holders(Role::kStorage, &rack);
    std::vector<Candidate> c = Candidates(Role::kStorage, &rack);
    for (int i = 0; i < need && i < static_cast<int>(c.size()); ++i) {
      out_[c[i].node->id].Add(Role::kStorage);
    }
  }

  // Fills `role` up to `target` holders, each pick from the rack with the fewest holders so far
  // (ties: the rack whose best candidate scores highest), so the role spreads over racks.
  void Fill(Role role, int target) {
    int need = target - Holders(role, nullptr);
    if (need <= 0) return;
    std::map<std::string, int> per_rack;
    for (const std::string& rack : racks_) per_rack[rack] = Holders(role, &rack);
    std::map<std::string, std::vector<Candidate>> by_rack;
    std::map<std::string, size_t> next;
    for (const std::string& rack : racks_) by_rack[rack] = Candidates(role, &rack);
    for (; need > 0; --need) {
      const std::string* best = nullptr;
      for (const std::string& rack : racks_) {
        const std::vector<Candidate>& c = by_rack[rack];
        size_t i = next[rack];
        if (i >= c.size()) continue;
        if (best == nullptr) {
          best = &rack;
          continue;
        }
        const Candidate& mine = c[i];
        const Candidate& theirs = by_rack[*best][next[*best]];
        // Prefer a free node anywhere over doubling up, then the emptiest rack, then score.
        bool mf = Free(*mine.node), tf = Free(*theirs.node);
        if (mf != tf) {
          if (mf) best = &rack;
          continue;
        }
        if (per_rack[rack] != per_rack[*best]) {
          if (per_rack[rack] < per_rack[*best]) best = &rack;
          continue;
        }
        if (mine.score > theirs.score) best = &rack;
      }
      if (best == nullptr) return;  // fewer auto nodes than the target
      const Candidate& pick = by_rack[*best][next[*best]++];
      out_[pick.node->id].Add(role);
      per_rack[*best]++;
    }
  }

  const std::vector<ElectionNode>& nodes_;
  const ElectionConfig& config_;
  std::set<std::string> racks_;
  Assignment out_;
};

int Clamp(int v, int lo, int hi) { return std::max(lo, std::min(v, hi)); }
int CeilDiv(size_t n, int d) { return static_cast<int>((n + d - 1) / std::max(1, d)); }

}  // namespace

int SchedulerTarget(size_t n, const ElectionConfig& config) {
  int target =
      Clamp(CeilDiv(n, config.nodes_per_scheduler), config.scheduler_min, config.scheduler_max);
  // An odd count gives a majority with the same fault tolerance as the next even one.
  if (target % 2 == 0) target += target + 1 <= config.scheduler_max ? 1 : -1;
  return std::max(target, 0);
}

int GatewayTarget(size_t n, const ElectionConfig& config) {
  return Clamp(CeilDiv(n, config.nodes_per_gateway), config.gateway_min, config.gateway_max);
}

int ObserverTarget(size_t n, const ElectionConfig& config) {
  return Clamp(static_cast<int>(n) / std::max(1, config.nodes_per_observer), 0,
               config.observer_max);
}

Assignment ElectRoles(const std::vector<ElectionNode>& nodes, const ElectionConfig& config) {
  // Sorting by id makes the result independent of the order the view lists members in.
  std::vector<ElectionNode> sorted = nodes;
  std::sort(sorted.begin(), sorted.end(),
            [](const ElectionNode& a, const ElectionNode& b) { return a.id < b.id; });
  sorted.erase(
      std::unique(sorted.begin(), sorted.end(),
                  [](const ElectionNode& a, const ElectionNode& b) { return a.id == b.id; }),
      sorted.end());
  if (sorted.empty()) return {};
  return Election(sorted, config).Run();
}

}  // namespace exa::cluster
