#include "engine/kv_cache.h"

#include <algorithm>
#include <limits>

#include "common/check.h"

namespace exa::engine {

KvCache::KvCache(int32_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  EXA_CHECK(num_blocks >= 0 && block_size > 0) << num_blocks << " blocks of " << block_size;
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t KvCache::BlocksForBudget(int64_t budget_bytes, const ModelConfig& config,
                                 int32_t block_size) {
  const int64_t block_bytes = config.KvBytesPerToken() * block_size;
  if (block_bytes <= 0 || budget_bytes <= 0) return 0;
  return static_cast<int32_t>(std::min<int64_t>(budget_bytes / block_bytes,
                                                std::numeric_limits<int32_t>::max() / block_size));
}

int32_t KvCache::Shortfall(const std::vector<int32_t>& table, int32_t tokens) const {
  return std::max(0, BlocksFor(tokens) - static_cast<int32_t>(table.size()));
}

bool KvCache::Grow(std::vector<int32_t>* table, int32_t tokens) {
  const int32_t need = Shortfall(*table, tokens);
  if (need > free_blocks()) return false;
  for (int32_t i = 0; i < need; ++i) {
    table->push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvCache::Free(std::vector<int32_t>* table) {
  for (auto it = table->rbegin(); it != table->rend(); ++it) free_.push_back(*it);
  table->clear();
}

}  // namespace exa::engine
