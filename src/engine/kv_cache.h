// Paged KV cache bookkeeping (vLLM's PagedAttention idea): the cache is a fixed array of blocks
// of `block_size` token slots, sized once from the replica's byte budget; each sequence owns a
// block table listing its blocks in order, growing one block at a time. This class hands out and
// takes back block numbers; the memory itself lives in the Backend.
//
// Thread safety: none; owned by the engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_config.h"

namespace exa::engine {

class KvCache {
 public:
  KvCache(int32_t num_blocks, int32_t block_size);

  // Blocks a byte budget buys for `config` (fp32 K and V for every layer), or 0.
  static int32_t BlocksForBudget(int64_t budget_bytes, const ModelConfig& config,
                                 int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int32_t total_blocks() const { return num_blocks_; }
  int32_t free_blocks() const { return static_cast<int32_t>(free_.size()); }
  int32_t used_blocks() const { return num_blocks_ - free_blocks(); }

  int32_t BlocksFor(int32_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  // Blocks `table` still needs to hold `tokens` tokens.
  int32_t Shortfall(const std::vector<int32_t>& table, int32_t tokens) const;
  // Extends `table` to hold `tokens` tokens; all or nothing: false (and no change) when the free
  // blocks are too few.
  bool Grow(std::vector<int32_t>* table, int32_t tokens);
  // Returns every block of `table` and empties it.
  void Free(std::vector<int32_t>* table);
  // The cache slot of token `position` of a sequence with `table`.
  int32_t Slot(const std::vector<int32_t>& table, int32_t position) const {
    return table[position / block_size_] * block_size_ + position % block_size_;
  }

 private:
  int32_t num_blocks_;
  int32_t block_size_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first
};

}  // namespace exa::engine
