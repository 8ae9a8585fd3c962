// Backend: the compute operations of a LLaMA-family forward pass, so the model code (model.h)
// runs unchanged on the CPU (cpu/cpu_backend.h) or a GPU (cuda/cuda_backend.h). This
// follows ggml's split: the model says *what* to compute, a backend says *how* and *where*.
//
// Data: weights are Weight handles made by UploadWeight (the CPU backend returns a view of the
// memory-mapped file, no copy); activations are fp32 row-major Buffers allocated by the backend
// once, at their largest size, and used through row views; the paged KV cache lives in the
// backend's memory, addressed by slot = block * block_size + offset.
//
// Threading: a backend is driven by one thread at a time (the replica's engine thread). Ops may
// run asynchronously on the device; CopyToHost is the synchronisation point.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/check.h"
#include "engine/dtype.h"
#include "engine/safetensors.h"

namespace exa::engine {

// A weight matrix [rows, cols] (a vector has rows == 1), row-major, in its stored dtype.
struct Weight {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  bool present() const { return data != nullptr; }
};

// fp32 activations [rows, cols], row-major with row stride `cols`.
struct Buffer {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  // The first `n` rows.
  Buffer Rows(int64_t n) const { return Buffer{data, n, cols}; }
};

struct KvCacheShape {
  int32_t num_layers = 0;
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t kv_dim = 0;  // num_kv_heads * head_dim
  int64_t Bytes() const {
    return int64_t{2} * num_layers * num_blocks * block_size * kv_dim * int64_t{sizeof(float)};
  }
};

// Where each token of a step sits: host-side metadata for RoPE, KV writes and attention.
// Tokens of one sequence are contiguous and in position order.
struct BatchLayout {
  std::vector<int32_t> positions;  // per token
  std::vector<int32_t> slots;      // per token: KV cache slot its K and V are written to
  std::vector<int32_t> token_seq;  // per token: index into block_tables
  std::vector<std::vector<int32_t>> block_tables;  // per sequence: its cache blocks in order
};

struct AttentionParams {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  float scale = 0;    // scores are q.k * scale; 0: 1 / sqrt(head_dim)
  float softcap = 0;  // > 0: scores soft-capped to softcap * tanh(s / softcap) (Gemma 2)
  // 0: a token attends to every position up to its own; w > 0: only to the last w of them
  // (positions p - w + 1 .. p), a sliding-window layer.
  int32_t window = 0;
};

// One row's token choice for Backend::SampleRows: engine/sampler.h's parameters without the
// repetition penalty and log-probabilities (those stay on the host), and the row's uniform draw
// in [0, 1) from the sequence's own seeded stream (unused when temperature is 0: greedy).
struct DeviceSampling {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float uniform = 0.0f;
};

// One product of MatMulShared: out = x @ w^T (+ bias).
struct MatMulTarget {
  const Weight* w = nullptr;
  const Weight* bias = nullptr;  // may be null or not present
  Buffer out;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // The first error of an op since creation. Ops return nothing (a device backend runs them
  // asynchronously), so a backend that can fail (CUDA: a faulting kernel, a lost device) keeps its
  // first error here and skips later ops; Model::Forward returns it after each step.
  virtual absl::Status status() const { return absl::OkStatus(); }
  // Seconds the driving thread has spent blocked on the device since creation (accelerators).
  virtual double device_wait_seconds() const { return 0; }
  // Bytes this backend holds for its replica: KV cache, activation buffers, weight copies of its
  // own (weights shared between replicas apart). Changes only on the driving thread.
  virtual int64_t held_bytes() const { return 0; }
  // Whether SampleRows is implemented: tokens are then chosen where the logits are, and only
  // the chosen ids cross to the host (kernels/sampling.h semantics).
  virtual bool can_sample_on_device() const { return false; }
  // Runs fn(begin, end) over chunks covering [0, n), one index a chunk, on the host threads the
  // backend keeps (the CPU backend's pool, idle between steps); inline where it keeps none. For
  // per-sequence host work between steps (structured outputs' masks).
  virtual void HostParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    fn(0, n);
  }
  // tokens[i] = the token row i of `logits` [rows.size(), vocab] gives under rows[i]; blocks
  // until the ids are on the host. Only called when can_sample_on_device().
  virtual void SampleRows(Buffer /*logits*/, std::span<const DeviceSampling> /*rows*/,
                          int32_t* /*tokens*/) {
    EXA_CHECK(false) << "backend " << name() << " cannot sample on the device";
  }

  virtual absl::StatusOr<Weight> UploadWeight(const TensorView& tensor) = 0;
  virtual absl::StatusOr<Buffer> Allocate(int64_t rows, int64_t cols) = 0;
  // Reserves the whole paged KV cache up front; no allocation happens in the step loop.
  virtual absl::Status AllocateKvCache(const KvCacheShape& shape) = 0;

  // out[i] = table[ids[i]] widened to fp32.
  virtual void Embedding(const Weight& table, std::span<const int32_t> ids, Buffer out) = 0;
  // out = x / rms(x) * weight, per row.
  virtual void RmsNorm(Buffer x, const Weight& weight, float eps, Buffer out) = 0;
  // out = x @ w^T (+ bias): x [T, K], w [N, K], out [T, N]. Each output element is computed
  // the same way whatever T is, so a sequence's result does not depend on its batch.
  virtual void MatMul(Buffer x, const Weight& w, const Weight* bias, Buffer out) = 0;
  // Several products of the same x (q/k/v; gate/up) in one go, so a backend can run them as one
  // parallel region or one grouped GEMM. Same per-element results as separate MatMul calls.
  virtual void MatMulShared(Buffer x, std::span<const MatMulTarget> targets) {
    for (const MatMulTarget& t : targets) MatMul(x, *t.w, t.bias, t.out);
  }
  // Rotates q [T, heads*head_dim] and k [T, kv_heads*head_dim] in place (HF rotate_half
  // convention) at each token's position; inv_freq has head_dim / 2 entries.
  virtual void Rope(Buffer q, Buffer k, int32_t head_dim, std::span<const float> inv_freq,
                    const BatchLayout& layout) = 0;
  // Writes each token's k and v rows to its slot of `layer`.
  virtual void StoreKv(int32_t layer, Buffer k, Buffer v, const BatchLayout& layout) = 0;
  // Causal attention of each token's q over its sequence's cached positions [0, position], or
  // the last params.window of them.
  virtual void Attention(int32_t layer, Buffer q, const AttentionParams& params,
                         const BatchLayout& layout, Buffer out) = 0;
  // out = silu(gate) * up.
  virtual void SiluMul(Buffer gate, Buffer up, Buffer out) = 0;
  // out = gelu_tanh(gate) * up, GELU's tanh approximation (engine/model_config.h Activation).
  virtual void GeluTanhMul(Buffer gate, Buffer up, Buffer out) = 0;
  // x *= s.
  virtual void Scale(Buffer x, float s) = 0;
  // x = cap * tanh(x / cap) (Gemma 2's logit soft-capping).
  virtual void SoftCap(Buffer x, float cap) = 0;
  // x += y.
  virtual void Add(Buffer x, Buffer y) = 0;
  // accum += x @ w^T (a residual connection), `scratch` [T, N] free for the product. The same
  // values as MatMul into scratch then Add (the default); a backend may fuse the two.
  virtual void MatMulAdd(Buffer x, const Weight& w, Buffer scratch, Buffer accum) {
    MatMul(x, w, nullptr, scratch);
    Add(accum, scratch);
  }
  // Called by Model before a step's first op with everything the step will need (tokens, layout,
  // logit rows, and the device sampling rows when ForwardSample): a device backend sends it all
  // in one copy instead of one per op. Optional: ops work without it.
  virtual void BeginStep(std::span<const int32_t> /*tokens*/, const BatchLayout& /*layout*/,
                         std::span<const int32_t> /*logit_rows*/,
                         std::span<const DeviceSampling> /*sampling*/) {}
  // out[i] = x[rows[i]].
  virtual void GatherRows(Buffer x, std::span<const int32_t> rows, Buffer out) = 0;
  // Copies x to host memory (x.rows * x.cols floats); waits for preceding ops.
  virtual void CopyToHost(Buffer x, float* host) = 0;
};

}  // namespace exa::engine
