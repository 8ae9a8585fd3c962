// Inner loops of the CPU backend, one implementation per instruction set (cpu_isa.h: scalar,
// AVX2, AVX-512), chosen at run time from ActiveIsa() (docs/architecture.md#cpu-backend).
// Weights stay in their stored dtype and are widened in registers; accumulation is fp32 whatever
// the weight dtype, and every product is exact (no rounding of x), so each path gives the
// reference's numerics. The one exception is asked for: x rounded to the weights' half type first
// (MatMulInput::Reset), the numerics of a half-precision model run in its own type, which for bf16
// the AVX512-BF16 path computes at twice the multiply-adds of fp32.
//
// Thread safety: pure functions over caller-owned memory; a MatMulInput is written by one thread
// (or disjoint row ranges by several) and then read by any number.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cpu/cpu_isa.h"
#include "engine/dtype.h"

namespace exa::engine::cpu {

// x [rows, k] (row stride ldx) made ready once for products with weights of one dtype, then
// shared by the threads that split the weight rows. The AVX-512 kernels read x against bf16
// weights with each 32-column block split into its even and odd columns (so one shift widens 16
// weights); the other kernels read x where it is.
class MatMulInput {
 public:
  // Uses the ISA active now for every product of this input. `round_x` (half-precision weights
  // only): x is rounded to the weights' type first, on every path, so that the paths agree; with
  // bf16 weights the AVX512-BF16 path then keeps x as bf16 and multiplies with vdpbf16ps.
  void Reset(const float* x, int64_t ldx, int64_t rows, int64_t k, DType weight_dtype,
             bool round_x = false);
  // Whether PackRows must run (over all rows) before the products.
  bool needs_pack() const { return needs_pack_; }
  // Rearranges rows [begin, end): threads may pack disjoint ranges.
  void PackRows(int64_t begin, int64_t end);

  Isa isa() const { return isa_; }
  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t k() const { return k_; }
  // The rows the kernels read, and their stride: fp32, or bf16 when bf16_rows() is true.
  const float* data() const { return needs_pack_ ? packed_.data() : x_; }
  const uint16_t* bf16_data() const { return packed_bf16_.data(); }
  bool bf16_rows() const { return bf16_rows_; }
  int64_t stride() const { return needs_pack_ ? packed_stride_ : ldx_; }

 private:
  Isa isa_ = Isa::kScalar;
  DType dtype_ = DType::kF32;
  const float* x_ = nullptr;
  int64_t ldx_ = 0, rows_ = 0, k_ = 0;
  bool needs_pack_ = false;
  bool round_ = false;      // x rounded to the weights' type before use
  bool bf16_rows_ = false;  // packed_bf16_ holds the rows (the AVX512-BF16 kernel)
  bool even_odd_ = false;   // packed_ holds the rows in the AVX-512 bf16 kernel's order
  int64_t packed_stride_ = 0;
  std::vector<float> packed_;
  std::vector<uint16_t> packed_bf16_;
};

// y[t, n] = dot(x[t, :], w[n, :]) for t in [0, x.rows()), n in [n_begin, n_end); w is [*, k] in
// x.dtype(), y has row stride ldy. The result for one (t, n) depends on neither the rows nor the
// n range (batch invariance).
void MatMulRange(const MatMulInput& x, const void* w, int64_t n_begin, int64_t n_end, float* y,
                 int64_t ldy);
// The same on x as it is (packed into thread-local scratch when needed); `round_x` as for
// MatMulInput::Reset.
void MatMulRange(const float* x, int64_t ldx, int64_t rows, const void* w, DType dtype, int64_t k,
                 int64_t n_begin, int64_t n_end, float* y, int64_t ldy, bool round_x = false);

// dst[i] = (float) src[i] for i in [0, n), src in `dtype`.
void ConvertRow(const void* src, DType dtype, int64_t n, float* dst);

// Causal attention of `heads` query heads that share one key/value head (grouped-query
// attention) over `len` cached positions: position j's key and value are the head_dim floats at
// keys + slots[j] * slot_stride (values likewise); head g's query is q + g * head_dim and
// out + g * head_dim = softmax(q . K^T * scale) V, the scores soft-capped to
// softcap * tanh(s / softcap) first when softcap > 0 (Gemma 2). Each cached row is read once for
// the group, and a head's result does not depend on `heads`. `scores` is scratch for heads * len
// floats.
void AttendGroup(const float* q, int32_t heads, const float* keys, const float* values,
                 const int32_t* slots, int64_t slot_stride, int32_t len, int32_t head_dim,
                 float scale, float* scores, float* out, float softcap = 0);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)) (the SwiGLU feed-forward's gate).
void SiluMul(const float* gate, const float* up, int64_t n, float* out);
// out[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715
// g^3))) (Gemma's GeGLU), computed as g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3))).
void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out);

// Returns dot(a, b) over n floats.
float DotF32(const float* a, const float* b, int64_t n);
// y[i] += alpha * x[i].
void Axpy(float alpha, const float* x, int64_t n, float* y);

}  // namespace exa::engine::cpu
