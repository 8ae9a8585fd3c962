// The bounded reference cache of the routing benchmark (docs/perf/routing.md#traces): block
// hashes, least recently used first out.
//
// Thread safety: none; the simulation owns it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/hash128.h"

namespace exa::bench {

// A set of block hashes holding at most `capacity`, the least recently used going first: one
// cache as large as all the replicas' KV together.
class LruBlocks {
 public:
  explicit LruBlocks(int64_t capacity) : capacity_(std::max<int64_t>(1, capacity)) {}

  // The leading blocks of `hashes` held, then every one of them made the most recent.
  size_t Touch(const std::vector<Hash128>& hashes) {
    size_t hit = 0;
    while (hit < hashes.size() && where_.contains(hashes[hit])) ++hit;
    for (const Hash128& h : hashes) {
      auto [it, inserted] = where_.try_emplace(h);
      if (!inserted) {
        order_.splice(order_.begin(), order_, it->second);
        continue;
      }
      order_.push_front(h);
      it->second = order_.begin();
      if (static_cast<int64_t>(order_.size()) > capacity_) {
        where_.erase(order_.back());
        order_.pop_back();
      }
    }
    return hit;
  }

 private:
  const int64_t capacity_;
  std::list<Hash128> order_;  // most recent first
  absl::flat_hash_map<Hash128, std::list<Hash128>::iterator> where_;
};

}  // namespace exa::bench
