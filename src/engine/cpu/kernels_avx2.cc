#include <immintrin.h>

#include <algorithm>

#include "engine/cpu/kernels_internal.h"

namespace exa::engine::cpu::internal {
namespace {

#define EXA_AVX2 __attribute__((target("avx2,fma,f16c")))

EXA_AVX2 inline __m256 Load8(const void* w, DType dtype, int64_t i) {
  if (dtype == DType::kF32) return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  __m128i h =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
  if (dtype == DType::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// A fixed reduction order, so every kernel shape gives bitwise the same sum.
EXA_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// TR rows of x against NR rows of w: TR*NR independent accumulators hide FMA latency while
// each loaded (and widened) weight vector is reused TR times. P: prefetch the weight rows
// (PrefetchAhead), for weights that stream from memory rather than sit in L2.
template <int TR, int NR, DType D, bool P>
EXA_AVX2 void Block(const float* x, int64_t ldx, const void* w, int64_t k, int64_t n, float* y,
                    int64_t ldy) {
  // The pragmas make GCC unroll the tiny loops fully, so the accumulators live in registers.
  __m256 acc[TR][NR];
#pragma GCC unroll 8
  for (int t = 0; t < TR; ++t)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[t][j] = _mm256_setzero_ps();
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t i = 0; i < k8; i += 8) {
    __m256 wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      // One prefetch a 64-byte line: every 16th f32 or 32nd half-precision weight.
      if (P && (i * static_cast<int64_t>(DTypeBytes(D))) % 64 == 0) {
        PrefetchAhead(w, (n + j) * k + i, DTypeBytes(D));
      }
      wv[j] = Load8(w, D, (n + j) * k + i);
    }
#pragma GCC unroll 8
    for (int t = 0; t < TR; ++t) {
      __m256 xv = _mm256_loadu_ps(x + t * ldx + i);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[t][j] = _mm256_fmadd_ps(xv, wv[j], acc[t][j]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < TR; ++t) {
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      float s = HorizontalSum(acc[t][j]);
      for (int64_t i = k8; i < k; ++i) s += x[t * ldx + i] * ElementToF32(w, D, (n + j) * k + i);
      y[t * ldy + n + j] = s;
    }
  }
}

// Rows of x in tiles of TR; weights in groups of NR, then one at a time for the tail.
template <int TR, int NR, DType D, bool P>
EXA_AVX2 void RowTile(const float* x, int64_t ldx, const void* w, int64_t k, int64_t n_begin,
                      int64_t n_end, float* y, int64_t ldy) {
  int64_t n = n_begin;
  for (; n + NR <= n_end; n += NR) Block<TR, NR, D, P>(x, ldx, w, k, n, y, ldy);
  for (; n < n_end; ++n) Block<TR, 1, D, P>(x, ldx, w, k, n, y, ldy);
}

// Rows [0, rows) of x (x and y already offset to the first row, y by `y_row_offset`) against
// weight rows [n_begin, n_end).
template <DType D, bool P>
EXA_AVX2 void RowTiles(const float* x, int64_t ldx, int64_t rows, const void* w, int64_t k,
                       int64_t n_begin, int64_t n_end, float* y, int64_t ldy,
                       int64_t y_row_offset) {
  float* yr = y + y_row_offset;
  int64_t t = 0;
  for (; t + 4 <= rows; t += 4)
    RowTile<4, 3, D, P>(x + t * ldx, ldx, w, k, n_begin, n_end, yr + t * ldy, ldy);
  for (; t + 2 <= rows; t += 2)
    RowTile<2, 4, D, P>(x + t * ldx, ldx, w, k, n_begin, n_end, yr + t * ldy, ldy);
  for (; t < rows; ++t)
    RowTile<1, 8, D, P>(x + t * ldx, ldx, w, k, n_begin, n_end, yr + t * ldy, ldy);
}

template <DType D>
EXA_AVX2 void MatMulAvx2Typed(const float* x, int64_t ldx, int64_t rows, const void* w, int64_t k,
                              int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  // Tiles of 32 rows keep the x tile in L2 while a strip of weights streams past it.
  constexpr int64_t kRowTile = 32;
  constexpr int64_t kColTile = 48;  // a multiple of the 3-row weight block
  // Half-precision weights are widened in registers whatever the rows: widening each strip once
  // into an fp32 copy in L2 measured 1.1-1.3x slower (2026-12-04, this path on an AVX-512 EPYC;
  // docs/perf/engine.md#bf16-activations), the doubled L2 traffic costing more than the
  // conversions it saves.
  for (int64_t r0 = 0; r0 < rows; r0 += kRowTile) {
    const int64_t r1 = std::min(rows, r0 + kRowTile);
    for (int64_t c0 = n_begin; c0 < n_end; c0 += kColTile) {
      const int64_t c1 = std::min(n_end, c0 + kColTile);
      // A few rows (decode) read each weight once, from memory: prefetch (see kernels_avx512.cc).
      if (rows <= kPrefetchMaxRows) {
        RowTiles<D, true>(x + r0 * ldx, ldx, r1 - r0, w, k, c0, c1, y, ldy, r0 * ldy);
      } else {
        RowTiles<D, false>(x + r0 * ldx, ldx, r1 - r0, w, k, c0, c1, y, ldy, r0 * ldy);
      }
    }
  }
}

EXA_AVX2 float DotImpl(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  float s = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

EXA_AVX2 void AxpyImpl(float alpha, const float* x, int64_t n, float* y) {
  __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

EXA_AVX2 void ConvertImpl(const void* src, DType dtype, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, Load8(src, dtype, i));
  for (; i < n; ++i) dst[i] = ElementToF32(src, dtype, i);
}

}  // namespace

float DotAvx2(const float* a, const float* b, int64_t n) { return DotImpl(a, b, n); }
void AxpyAvx2(float alpha, const float* x, int64_t n, float* y) { AxpyImpl(alpha, x, n, y); }
void ConvertAvx2(const void* src, DType dtype, int64_t n, float* dst) {
  ConvertImpl(src, dtype, n, dst);
}

void MatMulAvx2(const float* x, int64_t ldx, int64_t rows, const void* w, DType dtype, int64_t k,
                int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  switch (dtype) {
    case DType::kF32:
      return MatMulAvx2Typed<DType::kF32>(x, ldx, rows, w, k, n_begin, n_end, y, ldy);
    case DType::kF16:
      return MatMulAvx2Typed<DType::kF16>(x, ldx, rows, w, k, n_begin, n_end, y, ldy);
    case DType::kBF16:
      return MatMulAvx2Typed<DType::kBF16>(x, ldx, rows, w, k, n_begin, n_end, y, ldy);
  }
}

}  // namespace exa::engine::cpu::internal
