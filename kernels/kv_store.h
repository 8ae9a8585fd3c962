// Writes each token's k and v rows into its paged KV cache slot, narrowing fp32 to the cache's
// storage type: k_cache[slots[t], :] = k[t, :], v_cache[slots[t], :] = v[t, :]. The cache of one
// layer is [num_slots, kv_dim] per half, slot = block * block_size + offset (engine/kv_cache.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace exa::kernels {

struct KvStoreParams {
  const float* k = nullptr;        // [tokens, kv_dim] fp32, row stride k_stride
  const float* v = nullptr;        // [tokens, kv_dim] fp32, row stride v_stride
  void* k_cache = nullptr;         // [num_slots, kv_dim] in cache_dtype
  void* v_cache = nullptr;         // [num_slots, kv_dim] in cache_dtype
  const int32_t* slots = nullptr;  // [tokens] device, each in [0, num_slots)
  Dtype cache_dtype = Dtype::kBF16;
  int64_t tokens = 0;
  int64_t kv_dim = 0;
  int64_t num_slots = 0;
  int64_t k_stride = 0;
  int64_t v_stride = 0;

  absl::Status Validate() const;
};

absl::Status LaunchKvStore(const KvStoreParams& params, cudaStream_t stream);

}  // namespace exa::kernels
