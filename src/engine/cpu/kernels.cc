#include "engine/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/cpu/kernels_internal.h"

namespace exa::engine::cpu {
namespace {

void MatMulScalar(const float* x, int64_t ldx, int64_t rows, const void* w, DType dtype, int64_t k,
                  int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    const size_t row = static_cast<size_t>(n * k);
    for (int64_t t = 0; t < rows; ++t) {
      const float* xr = x + t * ldx;
      float acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += xr[i] * ElementToF32(w, dtype, row + i);
      y[t * ldy + n] = acc;
    }
  }
}

bool Avx512(Isa isa) { return isa >= Isa::kAvx512; }

}  // namespace

void MatMulInput::Reset(const float* x, int64_t ldx, int64_t rows, int64_t k, DType weight_dtype,
                        bool round_x) {
  isa_ = ActiveIsa();
  dtype_ = weight_dtype;
  x_ = x;
  ldx_ = ldx;
  rows_ = rows;
  k_ = k;
  round_ = round_x && weight_dtype != DType::kF32;
  bf16_rows_ = round_ && isa_ >= Isa::kAvx512Bf16;
  even_odd_ = Avx512(isa_) && weight_dtype == DType::kBF16 && !bf16_rows_;
  needs_pack_ = round_ || even_odd_;
  if (!needs_pack_) return;
  packed_stride_ = bf16_rows_ || even_odd_ ? internal::PackedBf16Stride(k) : k;
  if (bf16_rows_) {
    packed_bf16_.resize(static_cast<size_t>(rows * packed_stride_));
  } else {
    packed_.resize(static_cast<size_t>(rows * packed_stride_));
  }
}

void MatMulInput::PackRows(int64_t begin, int64_t end) {
  if (!needs_pack_ || begin >= end) return;
  if (bf16_rows_) {
    return internal::PackBf16InputAvx512Bf16(x_ + begin * ldx_, ldx_, end - begin, k_,
                                             packed_bf16_.data() + begin * packed_stride_);
  }
  thread_local std::vector<float> rounded;
  for (int64_t r = begin; r < end; ++r) {
    const float* row = x_ + r * ldx_;
    float* out = packed_.data() + r * packed_stride_;
    if (round_) {
      // Rounded where the kernels read it, or into scratch when they read it rearranged.
      if (even_odd_) rounded.resize(static_cast<size_t>(k_));
      float* dst = even_odd_ ? rounded.data() : out;
      if (dtype_ == DType::kBF16) {
        for (int64_t i = 0; i < k_; ++i) dst[i] = Bf16ToF32(F32ToBf16(row[i]));
      } else {
        for (int64_t i = 0; i < k_; ++i) dst[i] = F16ToF32(F32ToF16(row[i]));
      }
      row = dst;
    }
    if (even_odd_) internal::PackBf16RowsAvx512(row, k_, 1, k_, out);
  }
}

void MatMulRange(const MatMulInput& x, const void* w, int64_t n_begin, int64_t n_end, float* y,
                 int64_t ldy) {
  if (x.bf16_rows()) {
    return internal::MatMulAvx512Bf16(x.bf16_data(), x.stride(), x.rows(),
                                      static_cast<const uint16_t*>(w), x.k(), n_begin, n_end, y,
                                      ldy);
  }
  switch (x.isa()) {
    case Isa::kScalar:
      return MatMulScalar(x.data(), x.stride(), x.rows(), w, x.dtype(), x.k(), n_begin, n_end, y,
                          ldy);
    case Isa::kAvx2:
      return internal::MatMulAvx2(x.data(), x.stride(), x.rows(), w, x.dtype(), x.k(), n_begin,
                                  n_end, y, ldy);
    case Isa::kAvx512:
    case Isa::kAvx512Bf16:
      return internal::MatMulAvx512(x.data(), x.stride(), x.rows(), w, x.dtype(), x.k(), n_begin,
                                    n_end, y, ldy);
  }
}

void MatMulRange(const float* x, int64_t ldx, int64_t rows, const void* w, DType dtype, int64_t k,
                 int64_t n_begin, int64_t n_end, float* y, int64_t ldy, bool round_x) {
  thread_local MatMulInput input;
  input.Reset(x, ldx, rows, k, dtype, round_x);
  if (input.needs_pack()) input.PackRows(0, rows);
  MatMulRange(input, w, n_begin, n_end, y, ldy);
}

void ConvertRow(const void* src, DType dtype, int64_t n, float* dst) {
  const Isa isa = ActiveIsa();
  if (Avx512(isa)) return internal::ConvertAvx512(src, dtype, n, dst);
  if (isa == Isa::kAvx2) return internal::ConvertAvx2(src, dtype, n, dst);
  for (int64_t i = 0; i < n; ++i) dst[i] = ElementToF32(src, dtype, i);
}

void AttendGroup(const float* q, int32_t heads, const float* keys, const float* values,
                 const int32_t* slots, int64_t slot_stride, int32_t len, int32_t head_dim,
                 float scale, float* scores, float* out, float softcap) {
  if (Avx512(ActiveIsa()) &&
      internal::AttendGroupAvx512(q, heads, keys, values, slots, slot_stride, len, head_dim, scale,
                                  scores, out, softcap)) {
    return;
  }
  for (int32_t g = 0; g < heads; ++g) {
    const float* qg = q + int64_t{g} * head_dim;
    float* og = out + int64_t{g} * head_dim;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int32_t j = 0; j < len; ++j) {
      scores[j] = DotF32(qg, keys + slots[j] * slot_stride, head_dim) * scale;
      if (softcap > 0) scores[j] = softcap * std::tanh(scores[j] / softcap);
      max_score = std::max(max_score, scores[j]);
    }
    float sum = 0;
    for (int32_t j = 0; j < len; ++j) {
      scores[j] = std::exp(scores[j] - max_score);
      sum += scores[j];
    }
    std::fill(og, og + head_dim, 0.0f);
    for (int32_t j = 0; j < len; ++j) {
      Axpy(scores[j] / sum, values + slots[j] * slot_stride, head_dim, og);
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  if (Avx512(ActiveIsa())) return internal::SiluMulAvx512(gate, up, n, out);
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out) {
  if (Avx512(ActiveIsa())) return internal::GeluTanhMulAvx512(gate, up, n, out);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] =
        g / (1.0f + std::exp(-g * (internal::kGeluTanhA + internal::kGeluTanhB * g * g))) * up[i];
  }
}

float DotF32(const float* a, const float* b, int64_t n) {
  const Isa isa = ActiveIsa();
  if (Avx512(isa)) return internal::DotAvx512(a, b, n);
  if (isa == Isa::kAvx2) return internal::DotAvx2(a, b, n);
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void Axpy(float alpha, const float* x, int64_t n, float* y) {
  const Isa isa = ActiveIsa();
  if (Avx512(isa)) return internal::AxpyAvx512(alpha, x, n, y);
  if (isa == Isa::kAvx2) return internal::AxpyAvx2(alpha, x, n, y);
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace exa::engine::cpu
