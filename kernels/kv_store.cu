#include "kernels/cuda_check.h"
#include "kernels/device_utils.cuh"
#include "kernels/kv_store.h"
#include "kernels/validate.h"

namespace exa::kernels {
namespace {

constexpr int kThreads = 256;  // a decode step stores one row: its loads go out together

template <typename T>
__global__ void KvStoreKernel(KvStoreParams p) {
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slots[t];
  T* kc = static_cast<T*>(p.k_cache) + slot * p.kv_dim;
  T* vc = static_cast<T*>(p.v_cache) + slot * p.kv_dim;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < p.kv_dim; i += blockDim.x) {
    kc[i] = device::FromFloat<T>(p.k[t * p.k_stride + i]);
    vc[i] = device::FromFloat<T>(p.v[t * p.v_stride + i]);
  }
}

}  // namespace

absl::Status KvStoreParams::Validate() const {
  constexpr const char* kOp = "kv_store";
  EXA_KERNEL_REQUIRE_PTR(k, kOp);
  EXA_KERNEL_REQUIRE_PTR(v, kOp);
  EXA_KERNEL_REQUIRE_PTR(k_cache, kOp);
  EXA_KERNEL_REQUIRE_PTR(v_cache, kOp);
  EXA_KERNEL_REQUIRE_PTR(slots, kOp);
  EXA_KERNEL_REQUIRE(tokens >= 1 && tokens < (int64_t{1} << 31), kOp, "tokens", tokens,
                     "must be in [1, 2^31)");
  EXA_KERNEL_REQUIRE(kv_dim >= 1, kOp, "kv_dim", kv_dim, "must be at least 1");
  EXA_KERNEL_REQUIRE(num_slots >= 1, kOp, "num_slots", num_slots, "must be at least 1");
  EXA_KERNEL_REQUIRE(k_stride >= kv_dim, kOp, "k_stride", k_stride, "must be at least kv_dim");
  EXA_KERNEL_REQUIRE(v_stride >= kv_dim, kOp, "v_stride", v_stride, "must be at least kv_dim");
  return absl::OkStatus();
}

absl::Status LaunchKvStore(const KvStoreParams& p, cudaStream_t stream) {
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  EXA_CUDA_CHECK(EXA_DISPATCH_DTYPE(p.cache_dtype, T, [&] {
    KvStoreKernel<T><<<static_cast<unsigned>(p.tokens), kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }));
  return absl::OkStatus();
}

}  // namespace exa::kernels
