// The AVX-512 kernels (docs/architecture.md#cpu-backend): 16 fp32 lanes, masked loads for the
// tails, and register tiles of up to 6 (f32, f16 weights) or 4 (bf16) rows of x by 4 weight rows.
// Every output is one fp32 accumulator per lane over k in order, reduced in a fixed order at the
// end, so a result does not depend on the tile it was computed in (batch invariance) and weights
// are widened exactly. GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(),
// which its uninitialised-use warnings flag inside every caller.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "engine/cpu/avx512_common.h"
#include "engine/cpu/kernels_internal.h"

namespace exa::engine::cpu::internal {
namespace {

#define EXA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

// Weights [i, i + 16) widened to fp32; with Tail, lanes outside `m` zero. Full steps load without
// a mask: masked loads measured 2.5x slower at streaming weights from memory on an AVX-512 EPYC,
// the hardware prefetcher not following them (docs/perf/engine.md#batch-1-decode-streams).
template <DType D, bool Tail>
EXA_AVX512 inline __m512 Load16(const void* w, int64_t i, __mmask16 m) {
  if constexpr (D == DType::kF32) {
    const float* p = static_cast<const float*>(w) + i;
    return Tail ? _mm512_maskz_loadu_ps(m, p) : _mm512_loadu_ps(p);
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(w) + i;
    const __m256i h = Tail ? _mm256_maskz_loadu_epi16(m, p)
                           : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (D == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// One 16-column step of Block16 at column i (Tail: the last, partial one, masked by m).
template <int TR, int NR, DType D, bool P, bool Tail>
EXA_AVX512 inline void Step16(const float* x, int64_t ldx, const void* w, int64_t k, int64_t n,
                              int64_t js, int64_t i, __mmask16 m, __m512 (&acc)[TR][NR]) {
  __m512 xv[TR];
#pragma GCC unroll 8
  for (int t = 0; t < TR; ++t) {
    xv[t] = Tail ? _mm512_maskz_loadu_ps(m, x + t * ldx + i) : _mm512_loadu_ps(x + t * ldx + i);
  }
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    // One prefetch a 64-byte line: every step for f32, every other one for f16.
    if (P && (i * static_cast<int64_t>(DTypeBytes(D))) % 64 == 0) {
      PrefetchAhead(w, (n + j * js) * k + i, DTypeBytes(D));
    }
    const __m512 wv = Load16<D, Tail>(w, (n + j * js) * k + i, m);
#pragma GCC unroll 8
    for (int t = 0; t < TR; ++t) acc[t][j] = _mm512_fmadd_ps(wv, xv[t], acc[t][j]);
  }
}

// f32 and f16 weights: TR rows of x against NR weight rows n, n + js, n + 2 js..., 16 columns a
// step. TR * NR accumulators hide the FMA latency; each widened weight vector serves TR rows. P:
// prefetch the weight rows (PrefetchAhead), for weights that stream from memory rather than sit in
// L2.
template <int TR, int NR, DType D, bool P>
EXA_AVX512 void Block16(const float* x, int64_t ldx, const void* w, int64_t k, int64_t n, float* y,
                        int64_t ldy, int64_t js = 1) {
  __m512 acc[TR][NR];
#pragma GCC unroll 8
  for (int t = 0; t < TR; ++t)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[t][j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) Step16<TR, NR, D, P, false>(x, ldx, w, k, n, js, i, 0, acc);
  if (i < k) Step16<TR, NR, D, P, true>(x, ldx, w, k, n, js, i, Mask16(k - i), acc);
  StoreSums<TR, NR>(acc, y + n, ldy, js);
}

// One 32-column step of BlockBf16 at column i (Tail: the last, partial one, masked by m).
template <int TR, int NR, bool P, bool Tail>
EXA_AVX512 inline void StepBf16(const float* xp, int64_t ldxp, const uint16_t* w, int64_t k,
                                int64_t n, int64_t i, __mmask32 m, __m512 (&acc)[TR][NR]) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  __m512 xe[TR], xo[TR];
#pragma GCC unroll 8
  for (int t = 0; t < TR; ++t) {
    xe[t] = _mm512_loadu_ps(xp + t * ldxp + i);
    xo[t] = _mm512_loadu_ps(xp + t * ldxp + i + 16);
  }
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    if (P) PrefetchAhead(w, (n + j) * k + i, 2);
    const uint16_t* p = w + (n + j) * k + i;
    __m512i raw = Tail ? _mm512_maskz_loadu_epi16(m, p) : _mm512_loadu_si512(p);
    // One load for both halves: left to itself GCC folds the load into the shift and the mask,
    // reading each weight line twice.
    asm("" : "+v"(raw));
    const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
    const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(raw, high));
#pragma GCC unroll 8
    for (int t = 0; t < TR; ++t) {
      acc[t][j] = _mm512_fmadd_ps(we, xe[t], acc[t][j]);
      acc[t][j] = _mm512_fmadd_ps(wo, xo[t], acc[t][j]);
    }
  }
}

// bf16 weights, 32 columns a step: the 32 weights load as 16 dwords, whose low halves (even
// columns) widen with one shift and high halves (odd columns) with one mask; x comes packed with
// its even and odd columns apart to match (PackBf16RowsAvx512). P as for Block16.
template <int TR, int NR, bool P>
EXA_AVX512 void BlockBf16(const float* xp, int64_t ldxp, const uint16_t* w, int64_t k, int64_t n,
                          float* y, int64_t ldy) {
  __m512 acc[TR][NR];
#pragma GCC unroll 8
  for (int t = 0; t < TR; ++t)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[t][j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) StepBf16<TR, NR, P, false>(xp, ldxp, w, k, n, i, 0, acc);
  if (i < k) StepBf16<TR, NR, P, true>(xp, ldxp, w, k, n, i, Mask32(k - i), acc);
  StoreSums<TR, NR>(acc, y + n, ldy);
}

template <int TR, int NR, DType D, bool P>
EXA_AVX512 inline void Block(const float* x, int64_t ldx, const void* w, int64_t k, int64_t n,
                             float* y, int64_t ldy) {
  if constexpr (D == DType::kBF16) {
    BlockBf16<TR, NR, P>(x, ldx, static_cast<const uint16_t*>(w), k, n, y, ldy);
  } else {
    Block16<TR, NR, D, P>(x, ldx, w, k, n, y, ldy);
  }
}

// One row of x (batch-1 decode) against f16 weights, which it reads once from memory: the thread's
// range is split in halves walked side by side, a row of each at a time, with no software prefetch,
// so the weights arrive as two sequential streams that the hardware prefetcher follows. On an
// AVX-512 EPYC this read f16 weights 1.2x faster than the 8-row tiles with prefetches, which stay
// faster for f32 and exact bf16 weights: those need more independent sums in flight than two
// (docs/perf/engine.md#batch-1-decode-streams). Each output is summed as in any other tile.
EXA_AVX512 void DecodeRowF16(const float* x, const void* w, int64_t k, int64_t n_begin,
                             int64_t n_end, float* y) {
  constexpr DType kF16 = DType::kF16;
  WalkSpread<2>(
      n_begin, n_end,
      [&](int64_t n, int64_t span)
          EXA_AVX512 { Block16<1, 2, kF16, false>(x, 0, w, k, n, y, 0, span); },
      [&](int64_t n) EXA_AVX512 { Block16<1, 1, kF16, false>(x, 0, w, k, n, y, 0); });
}

// TR rows of x against weight rows [n_begin, n_end): NR at a time, then one at a time.
template <int TR, int NR, DType D, bool P>
EXA_AVX512 void RowTile(const float* x, int64_t ldx, const void* w, int64_t k, int64_t n_begin,
                        int64_t n_end, float* y, int64_t ldy) {
  int64_t n = n_begin;
  for (; n + NR <= n_end; n += NR) Block<TR, NR, D, P>(x, ldx, w, k, n, y, ldy);
  for (; n < n_end; ++n) Block<TR, 1, D, P>(x, ldx, w, k, n, y, ldy);
}

// Rows [0, rows) of x against weight rows [n_begin, n_end); y already offset to the first row.
template <DType D, bool P>
EXA_AVX512 void RowTiles(const float* x, int64_t ldx, int64_t rows, const void* w, int64_t k,
                         int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  int64_t t = 0;
  // 6 x 4 tiles for f32 and f16 weights: each weight vector serves 6 rows, which measured 10 %
  // faster than 4 x 4 on an AVX-512 EPYC; bf16 weights need two x registers a row and stay at 4.
  if constexpr (D != DType::kBF16) {
    for (; t + 6 <= rows; t += 6)
      RowTile<6, 4, D, P>(x + t * ldx, ldx, w, k, n_begin, n_end, y + t * ldy, ldy);
  }
  for (; t + 4 <= rows; t += 4)
    RowTile<4, 4, D, P>(x + t * ldx, ldx, w, k, n_begin, n_end, y + t * ldy, ldy);
  for (; t + 2 <= rows; t += 2)
    RowTile<2, 6, D, P>(x + t * ldx, ldx, w, k, n_begin, n_end, y + t * ldy, ldy);
  for (; t < rows; ++t)
    RowTile<1, 8, D, P>(x + t * ldx, ldx, w, k, n_begin, n_end, y + t * ldy, ldy);
}

EXA_AVX512 void ConvertImpl(const void* src, DType dtype, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = Mask16(n - i);
    __m512 v;
    if (dtype == DType::kF32) {
      v = Load16<DType::kF32, true>(src, i, m);
    } else if (dtype == DType::kF16) {
      v = Load16<DType::kF16, true>(src, i, m);
    } else {
      v = Load16<DType::kBF16, true>(src, i, m);
    }
    _mm512_mask_storeu_ps(dst + i, m, v);
  }
}

// Weight strips of about this many bytes stay in L2 while a tile of x rows passes them.
constexpr int64_t kStripBytes = 256 << 10;

template <DType D>
EXA_AVX512 void MatMulTyped(const float* x, int64_t ldx, int64_t rows, const void* w, int64_t k,
                            int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  if (D == DType::kF16 && rows == 1) return DecodeRowF16(x, w, k, n_begin, n_end, y);
  constexpr int64_t kRowTile = 64;
  const int64_t col_tile =
      std::clamp<int64_t>(kStripBytes / (k * static_cast<int64_t>(DTypeBytes(D))) / 4 * 4, 4, 128);
  // f16 weights are widened in registers whatever the rows: widening each strip once into an
  // fp32 copy in L2 and running the f32 kernel on it measured 1.3-1.8x slower on an AVX-512 EPYC
  // (2026-12-04, docs/perf/engine.md#bf16-activations), the doubled L2 traffic costing more than
  // one vcvtph2ps per 6 FMAs.
  for (int64_t r0 = 0; r0 < rows; r0 += kRowTile) {
    const int64_t r1 = std::min(rows, r0 + kRowTile);
    for (int64_t c0 = n_begin; c0 < n_end; c0 += col_tile) {
      const int64_t c1 = std::min(n_end, c0 + col_tile);
      // A few rows (decode) read each weight once, from memory: prefetch. More rows take the
      // strip from L2 after the first tile, where prefetching it again only costs issue slots.
      if (rows <= kPrefetchMaxRows) {
        RowTiles<D, true>(x + r0 * ldx, ldx, r1 - r0, w, k, c0, c1, y + r0 * ldy, ldy);
      } else {
        RowTiles<D, false>(x + r0 * ldx, ldx, r1 - r0, w, k, c0, c1, y + r0 * ldy, ldy);
      }
    }
  }
}

EXA_AVX512 void PackImpl(const float* x, int64_t ldx, int64_t rows, int64_t k, float* packed) {
  const int64_t stride = PackedBf16Stride(k);
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* out = packed + r * stride;
    for (int64_t i = 0; i < stride; i += 32) {
      const __m512 a = _mm512_maskz_loadu_ps(Mask16(k - i), xr + i);
      const __m512 b = _mm512_maskz_loadu_ps(Mask16(k - i - 16), xr + i + 16);
      _mm512_storeu_ps(out + i, _mm512_permutex2var_ps(a, even, b));
      _mm512_storeu_ps(out + i + 16, _mm512_permutex2var_ps(a, odd, b));
    }
  }
}

EXA_AVX512 float DotImpl(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = Mask16(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

EXA_AVX512 void AxpyImpl(float alpha, const float* x, int64_t n, float* y) {
  const __m512 a = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = Mask16(n - i);
    const __m512 v =
        _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

// exp(x), for softmax after subtracting the maximum (x <= 0) and silu's exp(-g) (+inf past 88.7):
// x = n ln2 + r with |r| <= ln2 / 2,
// exp(r) by its degree-7 Taylor polynomial (truncation below 1e-8 relative, under fp32 rounding)
// and the 2^n by vscalefps, which also takes very negative x to 0.
EXA_AVX512 inline __m512 Exp(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // exp(-104) is below the smallest float
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln 2 in two parts (Cody-Waite) so r keeps full precision.
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// The 16 * DV floats at `row` into registers.
template <int DV>
EXA_AVX512 inline void LoadRow(const float* row, __m512 (&v)[DV]) {
#pragma GCC unroll 8
  for (int d = 0; d < DV; ++d) v[d] = _mm512_loadu_ps(row + 16 * d);
}

// Replaces row[0, len) with exp(row[j] - max(row)), 16 lanes at a time; returns their sum.
EXA_AVX512 inline float ExpShiftedRow(float* row, int32_t len, float softcap) {
  if (softcap > 0) {  // s = cap tanh(s / cap), tanh(y) = 1 - 2 / (exp(2y) + 1), 16 at a time
    const __m512 two_over_cap = _mm512_set1_ps(2.0f / softcap), cap = _mm512_set1_ps(softcap);
    const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
    for (int32_t j = 0; j < len; j += 16) {
      const __mmask16 m = Mask16(len - j);
      // exp overflows to +inf past y = 44: 2 / inf = 0 and tanh = 1, as it should.
      const __m512 e = Exp(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), two_over_cap));
      const __m512 t = _mm512_sub_ps(one, _mm512_div_ps(two, _mm512_add_ps(e, one)));
      _mm512_mask_storeu_ps(row + j, m, _mm512_mul_ps(cap, t));
    }
  }
  float max_score = -3.4e38f;
  for (int32_t j = 0; j < len; ++j) max_score = std::max(max_score, row[j]);
  const __m512 max_v = _mm512_set1_ps(max_score);
  __m512 sum_v = _mm512_setzero_ps();
  for (int32_t j = 0; j < len; j += 16) {
    const __mmask16 m = Mask16(len - j);
    const __m512 e =
        _mm512_maskz_mov_ps(m, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + j), max_v)));
    _mm512_mask_storeu_ps(row + j, m, e);
    sum_v = _mm512_add_ps(sum_v, e);
  }
  return _mm512_reduce_add_ps(sum_v);
}

// GC query heads that share one key/value head (grouped-query attention), head_dim = 16 * DV:
// head g's query is q + 16 * DV * g, its scores scores + len * g, its output out + 16 * DV * g.
// The queries and output rows live in registers, each key and value row is loaded once for the
// GC heads, and the exponentials run 16 at a time. Each head's arithmetic is the same whatever
// GC is (its scores reduced by the one Sum4 tree), so grouping changes no result.
template <int DV, int GC>
EXA_AVX512 void AttendGroupImpl(const float* q, const float* keys, const float* values,
                                const int32_t* slots, int64_t slot_stride, int32_t len, float scale,
                                float* scores, float* out, float softcap) {
  static_assert(GC >= 1 && GC <= 4 && GC * DV <= 16, "queries and outputs must fit registers");
  __m512 qv[GC][DV];
#pragma GCC unroll 4
  for (int g = 0; g < GC; ++g) LoadRow<DV>(q + 16 * DV * g, qv[g]);
  // q . k, one accumulator per lane, for GC heads and 4 / GC keys (3 heads: one key and a zero):
  // their sums take one Sum4 (the same sums as reducing each alone); the last keys are reduced
  // one by one.
  constexpr int kKeys = 4 / GC;
  auto dots = [&](int32_t j, __m512* acc) EXA_AVX512 {
    __m512 kv[DV];
    LoadRow<DV>(keys + slots[j] * slot_stride, kv);
#pragma GCC unroll 4
    for (int g = 0; g < GC; ++g) {
      acc[g] = _mm512_mul_ps(qv[g][0], kv[0]);
#pragma GCC unroll 8
      for (int d = 1; d < DV; ++d) acc[g] = _mm512_fmadd_ps(qv[g][d], kv[d], acc[g]);
    }
  };
  int32_t j = 0;
  for (; j + kKeys <= len; j += kKeys) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
#pragma GCC unroll 4
    for (int u = 0; u < kKeys; ++u) dots(j + u, acc + u * GC);
    alignas(64) float sums[4];
    Sum4(acc[0], acc[1], acc[2], acc[3], sums);
#pragma GCC unroll 4
    for (int u = 0; u < kKeys; ++u)
#pragma GCC unroll 4
      for (int g = 0; g < GC; ++g) scores[g * len + j + u] = sums[u * GC + g] * scale;
  }
  for (; j < len; ++j) {
    __m512 acc[GC];
    dots(j, acc);
#pragma GCC unroll 4
    for (int g = 0; g < GC; ++g) scores[g * len + j] = _mm512_reduce_add_ps(acc[g]) * scale;
  }
  __m512 inv[GC];
#pragma GCC unroll 4
  for (int g = 0; g < GC; ++g)
    inv[g] = _mm512_set1_ps(1.0f / ExpShiftedRow(scores + g * len, len, softcap));
  __m512 o[GC][DV];
#pragma GCC unroll 4
  for (int g = 0; g < GC; ++g)
#pragma GCC unroll 8
    for (int d = 0; d < DV; ++d) o[g][d] = _mm512_setzero_ps();
  for (int32_t j = 0; j < len; ++j) {
    __m512 vv[DV];
    LoadRow<DV>(values + slots[j] * slot_stride, vv);
#pragma GCC unroll 4
    for (int g = 0; g < GC; ++g) {
      const __m512 p = _mm512_set1_ps(scores[g * len + j]);
#pragma GCC unroll 8
      for (int d = 0; d < DV; ++d) o[g][d] = _mm512_fmadd_ps(p, vv[d], o[g][d]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < GC; ++g)
#pragma GCC unroll 8
    for (int d = 0; d < DV; ++d) {
      _mm512_storeu_ps(out + 16 * (DV * g + d), _mm512_mul_ps(o[g][d], inv[g]));
    }
}

// Heads [0, heads) of a group: 4 at a time where the registers allow (then 3 left in one go),
// then 2 (up to head_dim 128), then 1.
template <int DV>
EXA_AVX512 void AttendGroupChunks(const float* q, int32_t heads, const float* keys,
                                  const float* values, const int32_t* slots, int64_t slot_stride,
                                  int32_t len, float scale, float* scores, float* out,
                                  float softcap) {
  int32_t g = 0;
  if constexpr (DV <= 4) {
    for (; g + 4 <= heads; g += 4) {
      AttendGroupImpl<DV, 4>(q + 16 * DV * g, keys, values, slots, slot_stride, len, scale,
                             scores + int64_t{len} * g, out + 16 * DV * g, softcap);
    }
    if (heads - g == 3) {
      AttendGroupImpl<DV, 3>(q + 16 * DV * g, keys, values, slots, slot_stride, len, scale,
                             scores + int64_t{len} * g, out + 16 * DV * g, softcap);
      g += 3;
    }
  }
  if constexpr (DV <= 8) {
    for (; g + 2 <= heads; g += 2) {
      AttendGroupImpl<DV, 2>(q + 16 * DV * g, keys, values, slots, slot_stride, len, scale,
                             scores + int64_t{len} * g, out + 16 * DV * g, softcap);
    }
  }
  for (; g < heads; ++g) {
    AttendGroupImpl<DV, 1>(q + 16 * DV * g, keys, values, slots, slot_stride, len, scale,
                           scores + int64_t{len} * g, out + 16 * DV * g, softcap);
  }
}

// out = g / (1 + exp(-u)) * up: silu with u = g, gelu_tanh with u = g (a + b g^2).
template <bool kGelu>
EXA_AVX512 void GatedImpl(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 a = _mm512_set1_ps(kGeluTanhA), b = _mm512_set1_ps(kGeluTanhB);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = Mask16(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = kGelu ? _mm512_mul_ps(g, _mm512_fmadd_ps(b, _mm512_mul_ps(g, g), a)) : g;
    // Exp of a positive argument past 88 is +inf, and g / inf the -0 the gate tends to.
    const __m512 act =
        _mm512_div_ps(g, _mm512_add_ps(one, Exp(_mm512_sub_ps(_mm512_setzero_ps(), u))));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(act, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace

void SiluMulAvx512(const float* gate, const float* up, int64_t n, float* out) {
  GatedImpl<false>(gate, up, n, out);
}

void GeluTanhMulAvx512(const float* gate, const float* up, int64_t n, float* out) {
  GatedImpl<true>(gate, up, n, out);
}

bool AttendGroupAvx512(const float* q, int32_t heads, const float* keys, const float* values,
                       const int32_t* slots, int64_t slot_stride, int32_t len, int32_t head_dim,
                       float scale, float* scores, float* out, float softcap) {
  if (head_dim == 32) {
    AttendGroupChunks<2>(q, heads, keys, values, slots, slot_stride, len, scale, scores, out,
                         softcap);
  } else if (head_dim == 64) {
    AttendGroupChunks<4>(q, heads, keys, values, slots, slot_stride, len, scale, scores, out,
                         softcap);
  } else if (head_dim == 128) {
    AttendGroupChunks<8>(q, heads, keys, values, slots, slot_stride, len, scale, scores, out,
                         softcap);
  } else if (head_dim == 256) {  // Gemma 3
    AttendGroupChunks<16>(q, heads, keys, values, slots, slot_stride, len, scale, scores, out,
                          softcap);
  } else {
    return false;
  }
  return true;
}

int64_t PackedBf16Stride(int64_t k) { return (k + 31) / 32 * 32; }

void PackBf16RowsAvx512(const float* x, int64_t ldx, int64_t rows, int64_t k, float* packed) {
  PackImpl(x, ldx, rows, k, packed);
}

void MatMulAvx512(const float* x, int64_t ldx, int64_t rows, const void* w, DType dtype, int64_t k,
                  int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  switch (dtype) {
    case DType::kF32:
      return MatMulTyped<DType::kF32>(x, ldx, rows, w, k, n_begin, n_end, y, ldy);
    case DType::kF16:
      return MatMulTyped<DType::kF16>(x, ldx, rows, w, k, n_begin, n_end, y, ldy);
    case DType::kBF16:
      return MatMulTyped<DType::kBF16>(x, ldx, rows, w, k, n_begin, n_end, y, ldy);
  }
}

void ConvertAvx512(const void* src, DType dtype, int64_t n, float* dst) {
  ConvertImpl(src, dtype, n, dst);
}
float DotAvx512(const float* a, const float* b, int64_t n) { return DotImpl(a, b, n); }
void AxpyAvx512(float alpha, const float* x, int64_t n, float* y) { AxpyImpl(alpha, x, n, y); }

}  // namespace exa::engine::cpu::internal
