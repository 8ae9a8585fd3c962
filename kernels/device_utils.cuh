// Device-side helpers shared by the .cu files (never included by host C++): loads that widen a
// stored element to fp32, stores that narrow it, and warp / block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>

namespace exa::kernels::device {

template <typename T>
__device__ __forceinline__ float ToFloat(T v);
template <>
__device__ __forceinline__ float ToFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float ToFloat<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Round-to-nearest-even, as the host's F32ToBf16 / F32ToF16.
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats of shared memory; the call synchronises the block.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -FLT_MAX;
  return WarpMax(v);
}

}  // namespace exa::kernels::device

// Instantiates `launch.template operator()<T>()` for the storage type named by a Dtype.
#define EXA_DISPATCH_DTYPE(dtype, T, ...)  \
  [&]() -> cudaError_t {                   \
    switch (dtype) {                       \
      case ::exa::kernels::Dtype::kF32: {  \
        using T = float;                   \
        return __VA_ARGS__();              \
      }                                    \
      case ::exa::kernels::Dtype::kF16: {  \
        using T = __half;                  \
        return __VA_ARGS__();              \
      }                                    \
      case ::exa::kernels::Dtype::kBF16: { \
        using T = __nv_bfloat16;           \
        return __VA_ARGS__();              \
      }                                    \
    }                                      \
    return cudaErrorInvalidValue;          \
  }()
