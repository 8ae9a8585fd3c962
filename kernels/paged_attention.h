// Causal attention over the paged KV cache (vLLM's PagedAttention layout), for decode and
// prefill tokens alike: query token t (at position p) attends to keys [0, p] of its sequence,
// found through the sequence's block table. GQA: the num_heads / num_kv_heads query heads of a
// group share one K/V head, and one thread block serves the whole group, so each K/V row is read
// once per group.
//
// Work split (flash-decoding): a thread block owns one query *tile* and one KV head and one
// *partition* of the keys. A tile is up to `16 / group` consecutive tokens of one sequence
// (decode: a single token; prefill: a run of the prompt, so a K/V row loaded once serves every
// query in the tile, the causal mask applied per query). The keys are split into partitions of
// PagedAttentionPlan::partition positions so a batch of a few long sequences still fills the
// GPU; each partition keeps a running max and sum (online softmax, fp32), and a second kernel
// merges the partitions' partial results. With one partition the first kernel writes `out`
// directly.
//
// Storage: the cache of one layer is two [num_slots, kv_dim] matrices (K and V) in cache_dtype,
// slot = block * block_size + offset; q and out are fp32 [tokens, num_heads * head_dim].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace exa::kernels {

inline constexpr int32_t kAttentionMaxRows = 16;      // query rows (tokens x group) per block
inline constexpr int32_t kAttentionMaxHeadDim = 256;  // Llama/Qwen/Mistral use 64..256
inline constexpr int32_t kAttentionChunk = 128;       // keys scored per block iteration

// Query tokens per tile for a GQA group size.
constexpr int32_t AttentionTileTokens(int32_t group) {
  return group >= kAttentionMaxRows ? 1 : kAttentionMaxRows / group;
}

struct PagedAttentionPlan {
  int32_t splits = 1;     // key partitions per tile (grid z)
  int32_t partition = 0;  // key positions per partition, a multiple of kAttentionChunk
};

// Chooses the key partitioning for a step: enough thread blocks to fill a large GPU (~1024),
// partitions of at least 256 keys, and partial results that fit `workspace_floats`. Pure.
PagedAttentionPlan PlanPagedAttention(int32_t tiles, int32_t tokens, int32_t num_heads,
                                      int32_t num_kv_heads, int32_t head_dim, int32_t max_context,
                                      int64_t workspace_floats);

// Floats of workspace a plan needs: (head_dim + 2) per token, head and split.
int64_t PagedAttentionWorkspaceFloats(const PagedAttentionPlan& plan, int32_t tokens,
                                      int32_t num_heads, int32_t head_dim);

// Splits a step's tokens into query tiles (host side, pure): runs of consecutive positions of
// one sequence, at most AttentionTileTokens(group) long. `first` and `count` are overwritten;
// returns the number of tiles.
int32_t BuildAttentionTiles(std::span<const int32_t> positions, std::span<const int32_t> token_seq,
                            int32_t group, int32_t* first, int32_t* count);

struct PagedAttentionParams {
  const float* q = nullptr;       // [tokens, num_heads * head_dim] fp32, row stride q_stride
  float* out = nullptr;           // [tokens, num_heads * head_dim] fp32, row stride out_stride
  const void* k_cache = nullptr;  // this layer's K: [num_slots, kv_dim] in cache_dtype
  const void* v_cache = nullptr;  // this layer's V: [num_slots, kv_dim] in cache_dtype
  Dtype cache_dtype = Dtype::kBF16;
  // Device arrays describing the step (engine/backend.h BatchLayout):
  const int32_t* positions = nullptr;     // [tokens]: the token's position in its sequence
  const int32_t* token_seq = nullptr;     // [tokens]: its row of block_tables
  const int32_t* block_tables = nullptr;  // [sequences, block_table_stride] block numbers
  const int32_t* tile_first = nullptr;    // [tiles]: first token of each query tile
  const int32_t* tile_count = nullptr;    // [tiles]: tokens in it (<= AttentionTileTokens)
  float* workspace = nullptr;             // PagedAttentionWorkspaceFloats(plan, ...) floats
  int64_t workspace_floats = 0;
  int32_t tokens = 0;
  int32_t tiles = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;  // a multiple of 8, at most kAttentionMaxHeadDim
  int32_t block_size = 0;
  int32_t block_table_stride = 0;
  int64_t num_slots = 0;
  int64_t q_stride = 0;
  int64_t out_stride = 0;
  float scale = 0;     // scores are q.k * scale; 0: 1 / sqrt(head_dim)
  int32_t window = 0;  // > 0: a token sees only the last `window` positions up to its own
  float softcap = 0;   // > 0: scores soft-capped to softcap * tanh(s / softcap)
  PagedAttentionPlan plan;

  absl::Status Validate() const;
};

absl::Status LaunchPagedAttention(const PagedAttentionParams& params, cudaStream_t stream);

}  // namespace exa::kernels
