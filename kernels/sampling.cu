#include <cfloat>

#include "kernels/cuda_check.h"
#include "kernels/device_utils.cuh"
#include "kernels/sampling.h"
#include "kernels/validate.h"

namespace exa::kernels {
namespace {

constexpr int kThreads = 1024;

// Order-preserving map of a float to an unsigned key (larger float, larger key).
__device__ __forceinline__ uint32_t Key(float f) {
  const uint32_t bits = __float_as_uint(f);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

// Block-wide sum of a 64-bit count; every thread gets it.
__device__ __forceinline__ unsigned long long BlockCount(unsigned long long v,
                                                         unsigned long long* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void __launch_bounds__(kThreads) SamplingKernel(SamplingParams p) {
  __shared__ float scratch[32];
  __shared__ unsigned long long count_scratch[32];
  __shared__ float segment_mass[kThreads];
  __shared__ int32_t best_index[32];
  __shared__ float best_value[32];
  const int row = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* logits = p.logits + int64_t{row} * p.logits_stride;

  // Argmax, lowest id on ties. Unrolled: the row's loads go out together.
  float best = -INFINITY;
  int32_t best_id = 0x7fffffff;
#pragma unroll 8
  for (int32_t i = tid; i < p.vocab; i += kThreads) {
    const float v = logits[i];
    if (v > best || (v == best && i < best_id)) best = v, best_id = i;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, best_id, o);
    if (ov > best || (ov == best && oi < best_id)) best = ov, best_id = oi;
  }
  if (lane == 0) best_value[warp] = best, best_index[warp] = best_id;
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < kThreads / 32; ++w) {
      if (best_value[w] > best_value[0] ||
          (best_value[w] == best_value[0] && best_index[w] < best_index[0])) {
        best_value[0] = best_value[w], best_index[0] = best_index[w];
      }
    }
  }
  __syncthreads();
  const float max_logit = best_value[0];
  const float temperature = p.temperature[row];
  if (!(temperature > 0.0f) || p.top_k[row] == 1) {
    if (tid == 0) p.tokens[row] = best_index[0];
    return;
  }
  const float inv_t = 1.0f / temperature;
  auto z = [&](int32_t i) { return (logits[i] - max_logit) * inv_t; };  // <= 0

  // Top-k threshold: the largest key with at least k keys >= it (the k-th largest z).
  uint32_t k_floor = 0;
  const int32_t top_k = p.top_k[row];
  if (top_k > 0 && top_k < p.vocab) {
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t candidate = k_floor | (1u << bit);
      unsigned long long n = 0;
      for (int32_t i = tid; i < p.vocab; i += kThreads) n += Key(z(i)) >= candidate;
      if (BlockCount(n, count_scratch) >= static_cast<unsigned long long>(top_k)) {
        k_floor = candidate;
      }
    }
  }
  // Mass over the top-k survivors, then the top-p threshold among them.
  float mass = 0.0f;
  for (int32_t i = tid; i < p.vocab; i += kThreads) {
    const float zi = z(i);
    if (Key(zi) >= k_floor) mass += __expf(zi);
  }
  const float kept_k = device::BlockSum(mass, scratch);
  uint32_t floor = k_floor;
  const float top_p = p.top_p[row];
  if (top_p < 1.0f) {
    const float goal = top_p * kept_k;
    uint32_t p_floor = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t candidate = p_floor | (1u << bit);
      float m = 0.0f;
      for (int32_t i = tid; i < p.vocab; i += kThreads) {
        const float zi = z(i);
        const uint32_t key = Key(zi);
        if (key >= candidate && key >= k_floor) m += __expf(zi);
      }
      if (device::BlockSum(m, scratch) >= goal) p_floor = candidate;
    }
    floor = max(floor, p_floor);
  }

  // The draw: contiguous id segments per thread, walked in id order by thread 0.
  const int32_t segment = (p.vocab + kThreads - 1) / kThreads;
  const int32_t seg_begin = min(p.vocab, tid * segment),
                seg_end = min(p.vocab, seg_begin + segment);
  float seg = 0.0f;
  for (int32_t i = seg_begin; i < seg_end; ++i) {
    const float zi = z(i);
    if (Key(zi) >= floor) seg += __expf(zi);
  }
  segment_mass[tid] = seg;
  __syncthreads();
  if (tid != 0) return;
  float total = 0.0f;
  for (int t = 0; t < kThreads; ++t) total += segment_mass[t];
  const float target = p.uniform[row] * total;
  float run = 0.0f;
  int32_t chosen = best_index[0];  // rounding fallback: the most likely token is always kept
  for (int t = 0; t < kThreads; ++t) {
    if (run + segment_mass[t] <= target) {
      run += segment_mass[t];
      continue;
    }
    const int32_t b = min(p.vocab, t * segment), e = min(p.vocab, b + segment);
    for (int32_t i = b; i < e; ++i) {
      const float zi = z(i);
      if (Key(zi) < floor) continue;
      run += __expf(zi);
      if (run > target) {
        chosen = i;
        break;
      }
    }
    break;
  }
  p.tokens[row] = chosen;
}

}  // namespace

absl::Status SamplingParams::Validate() const {
  constexpr const char* kOp = "sampling";
  EXA_KERNEL_REQUIRE_PTR(logits, kOp);
  EXA_KERNEL_REQUIRE_PTR(tokens, kOp);
  EXA_KERNEL_REQUIRE_PTR(temperature, kOp);
  EXA_KERNEL_REQUIRE_PTR(top_k, kOp);
  EXA_KERNEL_REQUIRE_PTR(top_p, kOp);
  EXA_KERNEL_REQUIRE_PTR(uniform, kOp);
  EXA_KERNEL_REQUIRE(rows >= 1, kOp, "rows", rows, "must be at least 1");
  EXA_KERNEL_REQUIRE(vocab >= 1, kOp, "vocab", vocab, "must be at least 1");
  EXA_KERNEL_REQUIRE(logits_stride >= vocab, kOp, "logits_stride", logits_stride,
                     "must be at least vocab");
  return absl::OkStatus();
}

absl::Status LaunchSampling(const SamplingParams& p, cudaStream_t stream) {
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  SamplingKernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p);
  EXA_CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace exa::kernels
