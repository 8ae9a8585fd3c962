#include <algorithm>
#include <cmath>

#include "kernels/cuda_check.h"
#include "kernels/device_utils.cuh"
#include "kernels/paged_attention.h"
#include "kernels/validate.h"

namespace exa::kernels {
namespace {

constexpr int kThreads = kAttentionChunk;  // one key per thread while scoring
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRows = kAttentionMaxRows;
constexpr int kDimsPerThread = kAttentionMaxHeadDim / kThreads;
constexpr int32_t kMinPartition = 256;
constexpr int32_t kTargetBlocks = 1024;  // a few waves on 132 SMs (H100) at 4+ blocks each

// Widens 8 consecutive stored elements (16-byte aligned for half types) to fp32.
template <typename T>
__device__ __forceinline__ void Load8(const T* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = device::ToFloat(h[i]);
}
template <>
__device__ __forceinline__ void Load8<float>(const float* p, float* out) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
  out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

__device__ __forceinline__ int64_t SlotOf(const int32_t* table, int32_t j, int32_t block_size) {
  return int64_t{table[j / block_size]} * block_size + j % block_size;
}

// Row r of a tile is (query token first + r / group, head kv_head * group + r % group).
template <typename T>
__global__ void __launch_bounds__(kThreads) AttentionKernel(PagedAttentionParams p) {
  __shared__ float q_s[kMaxRows * kAttentionMaxHeadDim];
  __shared__ float p_s[kMaxRows][kThreads];
  __shared__ float red_s[kMaxRows][kWarps];
  __shared__ int64_t slot_s[kThreads];  // the chunk's cache slots, looked up once while scoring
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t kvh = blockIdx.y, split = blockIdx.z;
  const int32_t first = p.tile_first[blockIdx.x], count = p.tile_count[blockIdx.x];
  const int32_t group = p.num_heads / p.num_kv_heads, dim = p.head_dim;
  const int32_t rows = count * group;
  const int32_t tile_len = p.positions[first + count - 1] + 1;
  const int32_t begin = split * p.plan.partition;
  const int32_t end = min(tile_len, begin + p.plan.partition);
  const int32_t* table = p.block_tables + int64_t{p.token_seq[first]} * p.block_table_stride;
  const int64_t kv_dim = int64_t{p.num_kv_heads} * dim;
  const T* k_cache = static_cast<const T*>(p.k_cache) + kvh * dim;
  const T* v_cache = static_cast<const T*>(p.v_cache) + kvh * dim;

  const float scale = p.scale > 0.0f ? p.scale : rsqrtf(static_cast<float>(dim));
#pragma unroll 4
  for (int i = tid; i < rows * dim; i += kThreads) {
    const int r = i / dim;
    const int64_t t = first + r / group;
    q_s[i] = p.q[t * p.q_stride + int64_t{kvh * group + r % group} * dim + i % dim] * scale;
  }
  int32_t len[kMaxRows], lo[kMaxRows];  // each row sees keys [lo, len): causal, and its window
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    len[r] = r < rows ? p.positions[first + r / group] + 1 : 0;
    lo[r] = p.window > 0 ? max(0, len[r] - p.window) : 0;
  }
  float m[kMaxRows], l[kMaxRows], acc[kMaxRows][kDimsPerThread];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int d = 0; d < kDimsPerThread; ++d) acc[r][d] = 0.0f;
  }
  __syncthreads();

  for (int32_t chunk = begin; chunk < end; chunk += kThreads) {
    // Score: this thread's key against every row of the tile.
    const int32_t j = chunk + tid;
    float s[kMaxRows];
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) s[r] = 0.0f;
    const int64_t slot = j < end ? SlotOf(table, j, p.block_size) : 0;
    slot_s[tid] = slot;
    if (j < end) {
      const T* krow = k_cache + slot * kv_dim;
      // Four 16-byte loads of the key issued before any use: one load per iteration left a
      // decode step latency-bound (29 us for 40 keys on an H200; EXA_CUDA_PROFILE_OPS).
#pragma unroll 2
      for (int d = 0; d < dim; d += 32) {
        float kf[4][8];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if (d + 8 * u < dim) Load8(krow + d + 8 * u, kf[u]);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if (d + 8 * u >= dim) break;
#pragma unroll
          for (int r = 0; r < kMaxRows; ++r) {
            if (r >= rows) break;
#pragma unroll
            for (int e = 0; e < 8; ++e) s[r] += q_s[r * dim + d + 8 * u + e] * kf[u][e];
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= rows) break;
      if (p.softcap > 0.0f) s[r] = p.softcap * tanhf(s[r] / p.softcap);
      // Past the partition, the causal mask, or before the window.
      if (j >= end || j >= len[r] || j < lo[r]) s[r] = -INFINITY;
      const float v = device::WarpMax(s[r]);
      if (lane == 0) red_s[r][warp] = v;
    }
    __syncthreads();
    float new_m[kMaxRows];
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= rows) break;
      float cm = red_s[r][0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) cm = fmaxf(cm, red_s[r][w]);
      new_m[r] = fmaxf(m[r], cm);
    }
    __syncthreads();  // red_s is reused for the sums
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= rows) break;
      const float e = s[r] == -INFINITY ? 0.0f : __expf(s[r] - new_m[r]);
      p_s[r][tid] = e;
      const float v = device::WarpSum(e);
      if (lane == 0) red_s[r][warp] = v;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= rows) break;
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += red_s[r][w];
      // A row with no visible key yet keeps m = -inf, l = 0.
      const float corr = m[r] == -INFINITY ? 0.0f : __expf(m[r] - new_m[r]);
      l[r] = l[r] * corr + sum;
      m[r] = new_m[r];
#pragma unroll
      for (int d = 0; d < kDimsPerThread; ++d) acc[r][d] *= corr;
    }
    // Accumulate: thread owns dims tid, tid + kThreads; keys in order.
    const int32_t n = min(kThreads, end - chunk);
    // Unrolled so sixteen keys' V loads are in flight at once, their slots from shared memory
    // (a block-table load before each V load made a decode step a chain of dependent loads:
    // 31 us for 40 keys on an H200, EXA_CUDA_PROFILE_OPS).
#pragma unroll 16
    for (int32_t jj = 0; jj < n; ++jj) {
      const T* vrow = v_cache + slot_s[jj] * kv_dim;
#pragma unroll
      for (int d = 0; d < kDimsPerThread; ++d) {
        const int dd = tid + d * kThreads;
        if (dd >= dim) break;
        const float vf = device::ToFloat(vrow[dd]);
#pragma unroll
        for (int r = 0; r < kMaxRows; ++r) {
          if (r >= rows) break;
          acc[r][d] += p_s[r][jj] * vf;
        }
      }
    }
    __syncthreads();  // p_s and red_s are rewritten by the next chunk
  }

#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {  // unrolled, so l, m and acc stay in registers
    if (r >= rows) break;
    const int64_t t = first + r / group;
    const int32_t head = kvh * group + r % group;
    if (p.plan.splits == 1) {
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma unroll
      for (int d = 0; d < kDimsPerThread; ++d) {
        const int dd = tid + d * kThreads;
        if (dd < dim) p.out[t * p.out_stride + int64_t{head} * dim + dd] = acc[r][d] * inv;
      }
      continue;
    }
    float* ws = p.workspace + ((t * p.num_heads + head) * p.plan.splits + split) * (dim + 2);
    if (tid == 0) {
      ws[0] = m[r];
      ws[1] = l[r];
    }
#pragma unroll
    for (int d = 0; d < kDimsPerThread; ++d) {
      const int dd = tid + d * kThreads;
      if (dd < dim) ws[2 + dd] = acc[r][d];
    }
  }
}

// Merges the partitions of one (token, head): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s -
// M).
__global__ void MergeKernel(PagedAttentionParams p) {
  const int64_t t = blockIdx.x;
  const int32_t head = blockIdx.y, dim = p.head_dim;
  const float* ws = p.workspace + (t * p.num_heads + head) * p.plan.splits * (dim + 2);
  float max_m = -INFINITY;
  for (int s = 0; s < p.plan.splits; ++s) max_m = fmaxf(max_m, ws[s * (dim + 2)]);
  float total = 0.0f;
  for (int s = 0; s < p.plan.splits; ++s) {
    const float ms = ws[s * (dim + 2)];
    if (ms != -INFINITY) total += ws[s * (dim + 2) + 1] * __expf(ms - max_m);
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < p.plan.splits; ++s) {
      const float ms = ws[s * (dim + 2)];
      if (ms != -INFINITY) o += ws[s * (dim + 2) + 2 + d] * __expf(ms - max_m);
    }
    p.out[t * p.out_stride + int64_t{head} * dim + d] = o * inv;
  }
}

// A step of single-token tiles (pure decode): one block per (token, KV head, split) as above,
// but the head dimension is spread over a warp's lanes (kDpl dims each) and each warp walks its
// own keys with an online softmax, so a key costs a coalesced row load and a few shuffles instead
// of a thread's serial 128-dim dot product per query row. The generic kernel above spent 30 us
// on 40 keys (ncu: 8 blocks, 26 cycles per issued instruction, latency-bound); this one's
// per-key work is kDpl FMAs per row plus a 5-step reduction.
constexpr int kDecodeWarps = 4;
constexpr int kDecodeMaxGroup = 8;

template <int kDpl, typename T>
__device__ __forceinline__ void LoadLane(const T* p, float (&out)[kDpl]) {
  if constexpr (sizeof(T) == 2 && kDpl == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = device::ToFloat(h[i]);
  } else if constexpr (sizeof(T) == 2 && kDpl == 4) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = device::ToFloat(h[i]);
  } else if constexpr (sizeof(T) == 2 && kDpl == 2) {
    const uint32_t raw = *reinterpret_cast<const uint32_t*>(p);
    const T* h = reinterpret_cast<const T*>(&raw);
    out[0] = device::ToFloat(h[0]);
    out[1] = device::ToFloat(h[1]);
  } else {
#pragma unroll
    for (int i = 0; i < kDpl; ++i) out[i] = device::ToFloat(p[i]);
  }
}

template <typename T, int kDpl>
__global__ void __launch_bounds__(kDecodeWarps * 32) DecodeAttentionKernel(PagedAttentionParams p) {
  constexpr int kDim = kDpl * 32;
  __shared__ float m_s[kDecodeWarps][kDecodeMaxGroup];
  __shared__ float l_s[kDecodeWarps][kDecodeMaxGroup];
  __shared__ float acc_s[kDecodeWarps][kDecodeMaxGroup][kDim];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t t = p.tile_first[blockIdx.x];  // every tile is one token
  const int32_t kvh = blockIdx.y, split = blockIdx.z;
  const int32_t group = p.num_heads / p.num_kv_heads;
  const int32_t len = p.positions[t] + 1;
  const int32_t begin = split * p.plan.partition;
  const int32_t end = min(len, begin + p.plan.partition);
  const int32_t* table = p.block_tables + int64_t{p.token_seq[t]} * p.block_table_stride;
  const int64_t kv_dim = int64_t{p.num_kv_heads} * kDim;
  const T* k_cache = static_cast<const T*>(p.k_cache) + kvh * kDim + lane * kDpl;
  const T* v_cache = static_cast<const T*>(p.v_cache) + kvh * kDim + lane * kDpl;
  const float scale = p.scale > 0.0f ? p.scale : rsqrtf(static_cast<float>(kDim));
  const int32_t lo = p.window > 0 ? max(0, len - p.window) : 0;  // the window's first key

  float q[kDecodeMaxGroup][kDpl], acc[kDecodeMaxGroup][kDpl], m[kDecodeMaxGroup],
      l[kDecodeMaxGroup];
#pragma unroll
  for (int r = 0; r < kDecodeMaxGroup; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int d = 0; d < kDpl; ++d) {
      acc[r][d] = 0.0f;
      q[r][d] =
          r < group
              ? p.q[t * p.q_stride + int64_t{kvh * group + r} * kDim + lane * kDpl + d] * scale
              : 0.0f;
    }
  }
#pragma unroll 2
  for (int32_t j = max(begin, lo) + warp; j < end; j += kDecodeWarps) {
    const int64_t slot = SlotOf(table, j, p.block_size) * kv_dim;
    float kf[kDpl], vf[kDpl];
    LoadLane<kDpl>(k_cache + slot, kf);
    LoadLane<kDpl>(v_cache + slot, vf);
#pragma unroll
    for (int r = 0; r < kDecodeMaxGroup; ++r) {
      if (r >= group) break;
      float s = 0.0f;
#pragma unroll
      for (int d = 0; d < kDpl; ++d) s += q[r][d] * kf[d];
      s = device::WarpSum(s);  // every lane holds the score
      if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
      const float new_m = fmaxf(m[r], s);
      const float corr = __expf(m[r] - new_m);  // m = -inf at first: corr 0
      const float e = __expf(s - new_m);
      l[r] = l[r] * corr + e;
#pragma unroll
      for (int d = 0; d < kDpl; ++d) acc[r][d] = acc[r][d] * corr + e * vf[d];
      m[r] = new_m;
    }
  }
  // The warps' partial softmaxes, merged.
#pragma unroll
  for (int r = 0; r < kDecodeMaxGroup; ++r) {
    if (r >= group) break;
    if (lane == 0) m_s[warp][r] = m[r], l_s[warp][r] = l[r];
#pragma unroll
    for (int d = 0; d < kDpl; ++d) acc_s[warp][r][lane * kDpl + d] = acc[r][d];
  }
  __syncthreads();
  for (int r = warp; r < group; r += kDecodeWarps) {
    float big = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) big = fmaxf(big, m_s[w][r]);
    float weight[kDecodeWarps], total = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      weight[w] = m_s[w][r] == -INFINITY ? 0.0f : __expf(m_s[w][r] - big);
      total += l_s[w][r] * weight[w];
    }
    const int32_t head = kvh * group + r;
    float* ws = p.plan.splits == 1
                    ? nullptr
                    : p.workspace +
                          ((int64_t{t} * p.num_heads + head) * p.plan.splits + split) * (kDim + 2);
    if (ws != nullptr && lane == 0) ws[0] = big, ws[1] = total;
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
#pragma unroll
    for (int d = 0; d < kDpl; ++d) {
      const int dd = lane * kDpl + d;
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) o += acc_s[w][r][dd] * weight[w];
      if (ws != nullptr) {
        ws[2 + dd] = o;
      } else {
        p.out[t * p.out_stride + int64_t{head} * kDim + dd] = o * inv;
      }
    }
  }
}

// Whether DecodeAttentionKernel takes the step: single-token tiles, a head dim of 64, 128 or
// 256, at most 8 query heads per KV head (Llama 3, Mistral, Qwen 2.5: 4 to 8).
bool DecodePath(const PagedAttentionParams& p) {
  const int32_t group = p.num_heads / p.num_kv_heads;
  return p.tiles == p.tokens && group <= kDecodeMaxGroup &&
         (p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256);
}

int32_t RoundUp(int32_t x, int32_t to) { return (x + to - 1) / to * to; }

}  // namespace

PagedAttentionPlan PlanPagedAttention(int32_t tiles, int32_t tokens, int32_t num_heads,
                                      int32_t num_kv_heads, int32_t head_dim, int32_t max_context,
                                      int64_t workspace_floats) {
  PagedAttentionPlan plan;
  plan.partition = RoundUp(std::max(max_context, 1), kAttentionChunk);
  const int32_t useful = (max_context + kMinPartition - 1) / kMinPartition;
  const int64_t blocks = int64_t{std::max(tiles, 1)} * std::max(num_kv_heads, 1);
  int64_t splits = std::min<int64_t>(useful, (kTargetBlocks + blocks - 1) / blocks);
  const int64_t per_split = int64_t{tokens} * num_heads * (head_dim + 2);
  if (per_split > 0) splits = std::min(splits, workspace_floats / per_split);
  if (splits <= 1) return plan;
  plan.partition =
      RoundUp((max_context + static_cast<int32_t>(splits) - 1) / static_cast<int32_t>(splits),
              kAttentionChunk);
  plan.splits = (max_context + plan.partition - 1) / plan.partition;
  return plan;
}

int32_t BuildAttentionTiles(std::span<const int32_t> positions, std::span<const int32_t> token_seq,
                            int32_t group, int32_t* first, int32_t* count) {
  const int32_t tile_tokens = AttentionTileTokens(group);
  int32_t tiles = 0;
  for (size_t t = 0; t < positions.size(); ++t) {
    const bool extend = tiles > 0 && token_seq[t] == token_seq[t - 1] &&
                        positions[t] == positions[t - 1] + 1 && count[tiles - 1] < tile_tokens;
    if (extend) {
      ++count[tiles - 1];
    } else {
      first[tiles] = static_cast<int32_t>(t);
      count[tiles] = 1;
      ++tiles;
    }
  }
  return tiles;
}

int64_t PagedAttentionWorkspaceFloats(const PagedAttentionPlan& plan, int32_t tokens,
                                      int32_t num_heads, int32_t head_dim) {
  return plan.splits <= 1 ? 0 : int64_t{tokens} * num_heads * plan.splits * (head_dim + 2);
}

absl::Status PagedAttentionParams::Validate() const {
  constexpr const char* kOp = "paged_attention";
  EXA_KERNEL_REQUIRE_PTR(q, kOp);
  EXA_KERNEL_REQUIRE_PTR(out, kOp);
  EXA_KERNEL_REQUIRE_PTR(k_cache, kOp);
  EXA_KERNEL_REQUIRE_PTR(v_cache, kOp);
  EXA_KERNEL_REQUIRE_PTR(positions, kOp);
  EXA_KERNEL_REQUIRE_PTR(token_seq, kOp);
  EXA_KERNEL_REQUIRE_PTR(block_tables, kOp);
  EXA_KERNEL_REQUIRE_PTR(tile_first, kOp);
  EXA_KERNEL_REQUIRE_PTR(tile_count, kOp);
  EXA_KERNEL_REQUIRE(tokens >= 1, kOp, "tokens", tokens, "must be at least 1");
  EXA_KERNEL_REQUIRE(tiles >= 1 && tiles <= tokens, kOp, "tiles", tiles, "must be in [1, tokens]");
  EXA_KERNEL_REQUIRE(num_kv_heads >= 1, kOp, "num_kv_heads", num_kv_heads, "must be at least 1");
  EXA_KERNEL_REQUIRE(num_heads >= num_kv_heads && num_heads % num_kv_heads == 0, kOp, "num_heads",
                     num_heads, "must be a multiple of num_kv_heads");
  EXA_KERNEL_REQUIRE(num_heads / num_kv_heads <= kAttentionMaxRows, kOp, "group size",
                     num_heads / num_kv_heads, "must be at most 16 query heads per KV head");
  EXA_KERNEL_REQUIRE(head_dim >= 8 && head_dim <= kAttentionMaxHeadDim && head_dim % 8 == 0, kOp,
                     "head_dim", head_dim, "must be a multiple of 8 in [8, 256]");
  EXA_KERNEL_REQUIRE(block_size >= 1, kOp, "block_size", block_size, "must be at least 1");
  EXA_KERNEL_REQUIRE(block_table_stride >= 1, kOp, "block_table_stride", block_table_stride,
                     "must be at least 1");
  EXA_KERNEL_REQUIRE(num_slots >= block_size, kOp, "num_slots", num_slots,
                     "must hold at least one block");
  EXA_KERNEL_REQUIRE(q_stride >= int64_t{num_heads} * head_dim, kOp, "q_stride", q_stride,
                     "must be at least num_heads * head_dim");
  EXA_KERNEL_REQUIRE(out_stride >= int64_t{num_heads} * head_dim, kOp, "out_stride", out_stride,
                     "must be at least num_heads * head_dim");
  EXA_KERNEL_REQUIRE(plan.splits >= 1, kOp, "plan.splits", plan.splits, "must be at least 1");
  EXA_KERNEL_REQUIRE(scale >= 0.0f && std::isfinite(scale), kOp, "scale", scale,
                     "must be finite and not negative");
  EXA_KERNEL_REQUIRE(window >= 0, kOp, "window", window, "must not be negative");
  EXA_KERNEL_REQUIRE(softcap >= 0.0f && std::isfinite(softcap), kOp, "softcap", softcap,
                     "must be finite and not negative");
  EXA_KERNEL_REQUIRE(plan.partition >= kAttentionChunk && plan.partition % kAttentionChunk == 0,
                     kOp, "plan.partition", plan.partition, "must be a positive multiple of 128");
  const int64_t need = PagedAttentionWorkspaceFloats(plan, tokens, num_heads, head_dim);
  if (need > 0) EXA_KERNEL_REQUIRE_PTR(workspace, kOp);
  EXA_KERNEL_REQUIRE(workspace_floats >= need, kOp, "workspace_floats", workspace_floats,
                     "is less than the plan needs");
  return absl::OkStatus();
}

absl::Status LaunchPagedAttention(const PagedAttentionParams& p, cudaStream_t stream) {
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  const dim3 grid(static_cast<unsigned>(p.tiles), static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(p.plan.splits));
  if (DecodePath(p)) {
    EXA_CUDA_CHECK(EXA_DISPATCH_DTYPE(p.cache_dtype, T, [&] {
      switch (p.head_dim) {
        case 64:
          DecodeAttentionKernel<T, 2><<<grid, kDecodeWarps * 32, 0, stream>>>(p);
          break;
        case 128:
          DecodeAttentionKernel<T, 4><<<grid, kDecodeWarps * 32, 0, stream>>>(p);
          break;
        default:
          DecodeAttentionKernel<T, 8><<<grid, kDecodeWarps * 32, 0, stream>>>(p);
          break;
      }
      return cudaGetLastError();
    }));
  } else {
    EXA_CUDA_CHECK(EXA_DISPATCH_DTYPE(p.cache_dtype, T, [&] {
      AttentionKernel<T><<<grid, kThreads, 0, stream>>>(p);
      return cudaGetLastError();
    }));
  }
  if (p.plan.splits > 1) {
    MergeKernel<<<dim3(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.num_heads)), 128, 0,
                  stream>>>(p);
    EXA_CUDA_CHECK(cudaGetLastError());
  }
  return absl::OkStatus();
}

}  // namespace exa::kernels
