#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/device_utils.cuh"
#include "kernels/gemv.h"
#include "kernels/validate.h"

namespace exa::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

// Eight packed half-precision weights widened to fp32.
template <typename T>
__device__ __forceinline__ void Widen8(const uint4& packed, float (&out)[8]) {
  const T* h = reinterpret_cast<const T*>(&packed);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = device::ToFloat<T>(h[i]);
}

template <typename T, int kRows>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) GemvKernel(GemvParams p) {
  const int lane = threadIdx.x & 31;
  // This warp's weight row across the targets laid end to end.
  int64_t row_n = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5);
  // Unrolled with constant indices, so the parameters stay out of local memory.
  GemvTarget target;
  bool found = false;
#pragma unroll
  for (int t = 0; t < kGemvMaxTargets; ++t) {
    if (found || t >= p.num_targets) continue;
    if (row_n < p.targets[t].n) {
      target = p.targets[t];
      found = true;
    } else {
      row_n -= p.targets[t].n;
    }
  }
  if (!found) return;
  const uint4* w = reinterpret_cast<const uint4*>(static_cast<const T*>(target.w) + row_n * p.k);
  const int64_t chunks = p.k / 8;  // 16-byte chunks of the weight row
  float acc[kRows] = {};
  int64_t c = lane;
  // Main loop: kUnroll independent loads per lane before any arithmetic uses them.
  for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {
    uint4 packed[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) packed[u] = __ldg(w + c + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float wf[8];
      Widen8<T>(packed[u], wf);
      const int64_t col = (c + 32 * u) * 8;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4* xr = reinterpret_cast<const float4*>(p.x + r * p.x_stride + col);
        const float4 a = __ldg(xr), b = __ldg(xr + 1);
        acc[r] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x +
                  wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
      }
    }
  }
  for (; c < chunks; c += 32) {
    float wf[8];
    Widen8<T>(__ldg(w + c), wf);
    const int64_t col = c * 8;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float4* xr = reinterpret_cast<const float4*>(p.x + r * p.x_stride + col);
      const float4 a = __ldg(xr), b = __ldg(xr + 1);
      acc[r] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x + wf[5] * b.y +
                wf[6] * b.z + wf[7] * b.w;
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float v = acc[r];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) {
      float* o = target.out + r * target.out_stride + row_n;
      *o = p.accumulate ? *o + v : v;
    }
  }
}

template <typename T>
cudaError_t Launch(const GemvParams& p, cudaStream_t stream) {
  int64_t n = 0;
  for (int t = 0; t < p.num_targets; ++t) n += p.targets[t].n;
  const unsigned blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const unsigned threads = kWarpsPerBlock * 32;
  switch (p.rows) {
    case 1:
      GemvKernel<T, 1><<<blocks, threads, 0, stream>>>(p);
      break;
    case 2:
      GemvKernel<T, 2><<<blocks, threads, 0, stream>>>(p);
      break;
    case 3:
      GemvKernel<T, 3><<<blocks, threads, 0, stream>>>(p);
      break;
    default:
      GemvKernel<T, 4><<<blocks, threads, 0, stream>>>(p);
      break;
  }
  return cudaGetLastError();
}

}  // namespace

absl::Status GemvParams::Validate() const {
  constexpr const char* kOp = "gemv";
  EXA_KERNEL_REQUIRE_PTR(x, kOp);
  EXA_KERNEL_REQUIRE(num_targets >= 1 && num_targets <= kGemvMaxTargets, kOp, "num_targets",
                     num_targets, "must be in [1, 3]");
  int64_t total_n = 0;
  for (int t = 0; t < num_targets; ++t) {
    const GemvTarget& g = targets[t];
    EXA_KERNEL_REQUIRE(g.w != nullptr && g.out != nullptr, kOp, "target", t,
                       "needs w and out pointers");
    EXA_KERNEL_REQUIRE(g.n >= 1, kOp, "n", g.n, "must be at least 1");
    EXA_KERNEL_REQUIRE(g.out_stride >= g.n, kOp, "out_stride", g.out_stride, "must be at least n");
    EXA_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(g.w) % 16 == 0, kOp, "w alignment",
                       static_cast<int64_t>(reinterpret_cast<uintptr_t>(g.w) % 16),
                       "must be 16 bytes");
    total_n += g.n;
  }
  EXA_KERNEL_REQUIRE(total_n <= (int64_t{1} << 31) - 1, kOp, "n (all targets)", total_n,
                     "must be below 2^31");
  EXA_KERNEL_REQUIRE(w_dtype != Dtype::kF32, kOp, "w_dtype", static_cast<int64_t>(w_dtype),
                     "must be bf16 or f16");
  EXA_KERNEL_REQUIRE(rows >= 1 && rows <= kGemvMaxRows, kOp, "rows", rows, "must be in [1, 4]");
  EXA_KERNEL_REQUIRE(k >= 8 && k % 8 == 0, kOp, "k", k, "must be a positive multiple of 8");
  EXA_KERNEL_REQUIRE(x_stride >= k && x_stride % 4 == 0, kOp, "x_stride", x_stride,
                     "must be at least k and a multiple of 4");
  EXA_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0, kOp, "x alignment",
                     static_cast<int64_t>(reinterpret_cast<uintptr_t>(x) % 16), "must be 16 bytes");
  return absl::OkStatus();
}

absl::Status LaunchGemv(const GemvParams& p, cudaStream_t stream) {
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  if (p.w_dtype == Dtype::kBF16) {
    EXA_CUDA_CHECK(Launch<__nv_bfloat16>(p, stream));
  } else {
    EXA_CUDA_CHECK(Launch<__half>(p, stream));
  }
  return absl::OkStatus();
}

}  // namespace exa::kernels
