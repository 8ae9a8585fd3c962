#include "kernels/cuda_check.h"
#include "kernels/rope.h"
#include "kernels/validate.h"

namespace exa::kernels {
namespace {

// Wide blocks and an unrolled loop: a decode step is one token, and 128 threads walking 2560
// pairs one dependent load at a time took ~10 us on an H200 (EXA_CUDA_PROFILE_OPS).
constexpr int kThreads = 512;

__global__ void __launch_bounds__(kThreads) RopeKernel(RopeParams p) {
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(p.positions[t]);
  const int half = p.head_dim / 2;
  const int q_pairs = p.q_heads * half, pairs = (p.q_heads + p.k_heads) * half;
#pragma unroll 4
  for (int j = threadIdx.x; j < pairs; j += blockDim.x) {
    const bool is_q = j < q_pairs;
    const int local = is_q ? j : j - q_pairs;
    const int head = local / half, i = local % half;
    float* v = (is_q ? p.q + t * p.q_stride : p.k + t * p.k_stride) + head * p.head_dim;
    float s, c;
    sincosf(pos * p.inv_freq[i], &s, &c);
    const float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

}  // namespace

absl::Status RopeParams::Validate() const {
  constexpr const char* kOp = "rope";
  EXA_KERNEL_REQUIRE_PTR(q, kOp);
  EXA_KERNEL_REQUIRE_PTR(k, kOp);
  EXA_KERNEL_REQUIRE_PTR(positions, kOp);
  EXA_KERNEL_REQUIRE_PTR(inv_freq, kOp);
  EXA_KERNEL_REQUIRE(tokens >= 1 && tokens < (int64_t{1} << 31), kOp, "tokens", tokens,
                     "must be in [1, 2^31)");
  EXA_KERNEL_REQUIRE(head_dim >= 2 && head_dim % 2 == 0, kOp, "head_dim", head_dim,
                     "must be even and at least 2");
  EXA_KERNEL_REQUIRE(q_heads >= 1, kOp, "q_heads", q_heads, "must be at least 1");
  EXA_KERNEL_REQUIRE(k_heads >= 1, kOp, "k_heads", k_heads, "must be at least 1");
  EXA_KERNEL_REQUIRE(q_stride >= int64_t{q_heads} * head_dim, kOp, "q_stride", q_stride,
                     "must be at least q_heads * head_dim");
  EXA_KERNEL_REQUIRE(k_stride >= int64_t{k_heads} * head_dim, kOp, "k_stride", k_stride,
                     "must be at least k_heads * head_dim");
  return absl::OkStatus();
}

absl::Status LaunchRope(const RopeParams& p, cudaStream_t stream) {
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  RopeKernel<<<static_cast<unsigned>(p.tokens), kThreads, 0, stream>>>(p);
  EXA_CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace exa::kernels
