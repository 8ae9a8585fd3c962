// The CPU implementation of Backend: weights are used straight from the memory-mapped
// checkpoint (widened to fp32 in registers), activations and the KV cache are fp32 host memory,
// and every op is split across a thread pool sized at construction.
//
// Prefill is a GEMM (many rows of x against each weight row, x tiled to stay in cache); decode
// is the same kernel with one row per running sequence, so each weight byte is read once per
// step for the whole batch: the bandwidth-bound GEMV the hardware limit is measured against.
//
// Threading: as Backend (one driving thread); the pool's workers are internal.
#pragma once

#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/thread_pool.h"
#include "engine/dtype.h"

namespace exa::engine::cpu {

class CpuBackend final : public Backend {
 public:
  // `threads` <= 0 means one per hardware thread. `kv_storage` kBF16 or kF16: keys and values
  // are rounded to that type as they are stored (the cache itself stays fp32), giving the
  // numerics of a half-precision KV cache, as the CUDA backend keeps for half checkpoints; the
  // cross-backend tests compare like with like this way.
  // `spin`: how long idle pool threads spin before they block (ThreadPool).
  explicit CpuBackend(int threads, DType kv_storage = DType::kF32,
                      absl::Duration spin = absl::Microseconds(50));
  int64_t held_bytes() const override { return held_bytes_; }
  void HostParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) override {
    pool_.ParallelFor(n, fn, n);
  }

  // Products of x with at least `min_rows` rows against weights of `type` (bf16 / fp16) round x
  // to `type` first. For cross-backend tests, a reference for the CUDA backend, which narrows
  // activations for cuBLAS above its GEMV's rows (kernels/gemv.h); with bf16 from one row, the
  // numerics of a bf16 model run in bf16 (EngineOptions::cpu_bf16_activations), which the
  // AVX512-BF16 kernel computes at twice the rate. Default: never.
  void set_matmul_input_rounding(DType type, int64_t min_rows) {
    matmul_input_rounding_ = type;
    matmul_rounding_min_rows_ = min_rows;
  }

  std::string_view name() const override { return "cpu"; }
  int threads() const { return pool_.size(); }

  absl::StatusOr<Weight> UploadWeight(const TensorView& tensor) override;
  absl::StatusOr<Buffer> Allocate(int64_t rows, int64_t cols) override;
  absl::Status AllocateKvCache(const KvCacheShape& shape) override;

  void Embedding(const Weight& table, std::span<const int32_t> ids, Buffer out) override;
  void RmsNorm(Buffer x, const Weight& weight, float eps, Buffer out) override;
  void MatMul(Buffer x, const Weight& w, const Weight* bias, Buffer out) override;
  void MatMulShared(Buffer x, std::span<const MatMulTarget> targets) override;
  void Rope(Buffer q, Buffer k, int32_t head_dim, std::span<const float> inv_freq,
            const BatchLayout& layout) override;
  void StoreKv(int32_t layer, Buffer k, Buffer v, const BatchLayout& layout) override;
  void Attention(int32_t layer, Buffer q, const AttentionParams& params, const BatchLayout& layout,
                 Buffer out) override;
  void SiluMul(Buffer gate, Buffer up, Buffer out) override;
  void GeluTanhMul(Buffer gate, Buffer up, Buffer out) override;
  void Scale(Buffer x, float s) override;
  void SoftCap(Buffer x, float cap) override;
  void Add(Buffer x, Buffer y) override;
  void GatherRows(Buffer x, std::span<const int32_t> rows, Buffer out) override;
  void CopyToHost(Buffer x, float* host) override;

 private:
  float* KeyAt(int32_t layer, int32_t slot) const;
  float* ValueAt(int32_t layer, int32_t slot) const;
  // inputs_[dtype] made ready for every weight dtype among `targets`, x rounded for the dtype
  // set_matmul_input_rounding names.
  void PrepareInputs(Buffer x, std::span<const MatMulTarget> targets);

  // ParallelFor for element-wise work: inline when too small to be worth waking the pool (each
  // wake costs tens of microseconds, more on a busy machine; decode runs hundreds per token).
  // `chunks` as for ThreadPool::ParallelFor.
  void ParallelRows(int64_t rows, int64_t cost_per_row,
                    const std::function<void(int64_t, int64_t)>& fn, int64_t chunks = 0);

  ThreadPool pool_;
  DType kv_storage_;  // the precision K and V are rounded to when stored
  DType matmul_input_rounding_ = DType::kF32;
  int64_t matmul_rounding_min_rows_ = 0;
  MatMulInput inputs_[3];  // x of the current product, per weight DType
  std::vector<std::unique_ptr<float[]>> buffers_;
  int64_t held_bytes_ = 0;  // buffers_ and kv_
  KvCacheShape kv_shape_;
  std::unique_ptr<float[]> kv_;  // [layer][K|V][slot][kv_dim]
};

}  // namespace exa::engine::cpu
