// The AVX512-BF16 kernel (docs/architecture.md#cpu-backend): bf16 weights against x rounded to
// bf16, 32 columns a vdpbf16ps, which does twice the multiply-adds of an fp32 FMA and needs no
// widening. Each product of two bf16 values is exact in fp32; each lane sums its column pairs in
// k order and the 16 lanes are reduced in a fixed order at the end, so, as in the other kernels,
// a result does not depend on the tile it was computed in (batch invariance).
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which its
// uninitialised-use warnings flag inside every caller.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "engine/cpu/avx512_common.h"
#include "engine/cpu/kernels_internal.h"

namespace exa::engine::cpu::internal {
namespace {

#define EXA_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

// One 32-column step of Block at column i (Tail: the last, partial one, whose weights `m` masks).
// Full steps load without a mask, which the hardware prefetcher follows
// (docs/perf/engine.md#batch-1-decode-streams).
template <int TR, int NR, bool P, bool Tail>
EXA_AVX512BF16 inline void Step(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t k,
                                int64_t n, int64_t js, int64_t i, __mmask32 m,
                                __m512 (&acc)[TR][NR]) {
  __m512bh xv[TR];
#pragma GCC unroll 8
  for (int t = 0; t < TR; ++t) xv[t] = (__m512bh)_mm512_loadu_si512(x + t * ldx + i);
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    if (P) PrefetchAhead(w, (n + j * js) * k + i, 2);
    const uint16_t* p = w + (n + j * js) * k + i;
    const __m512bh wv = (__m512bh)(Tail ? _mm512_maskz_loadu_epi16(m, p) : _mm512_loadu_si512(p));
#pragma GCC unroll 8
    for (int t = 0; t < TR; ++t) acc[t][j] = _mm512_dpbf16_ps(acc[t][j], xv[t], wv);
  }
}

// TR rows of packed x against NR weight rows n, n + js, n + 2 js..., 32 columns a step. x rows are
// zero-padded to a multiple of 32 (PackBf16InputAvx512Bf16), so only the weights need a mask at the
// tail. P: prefetch the weight rows (PrefetchAhead), for weights that stream from memory.
template <int TR, int NR, bool P>
EXA_AVX512BF16 void Block(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t k, int64_t n,
                          float* y, int64_t ldy, int64_t js = 1) {
  __m512 acc[TR][NR];
#pragma GCC unroll 8
  for (int t = 0; t < TR; ++t)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[t][j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) Step<TR, NR, P, false>(x, ldx, w, k, n, js, i, 0, acc);
  if (i < k) Step<TR, NR, P, true>(x, ldx, w, k, n, js, i, Mask32(k - i), acc);
  StoreSums<TR, NR>(acc, y + n, ldy, js);
}

// TR rows of x against weight rows [n_begin, n_end): NR at a time, then one at a time.
template <int TR, int NR, bool P>
EXA_AVX512BF16 void RowTile(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t k,
                            int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  int64_t n = n_begin;
  for (; n + NR <= n_end; n += NR) Block<TR, NR, P>(x, ldx, w, k, n, y, ldy);
  for (; n < n_end; ++n) Block<TR, 1, P>(x, ldx, w, k, n, y, ldy);
}

// Rows [0, rows) of x against weight rows [n_begin, n_end); y already offset to the first row.
// 6 x 4 tiles measured fastest on an AVX-512 EPYC (docs/perf/engine.md): 24 accumulators hide
// the latency and each weight vector serves 6 rows.
template <bool P>
EXA_AVX512BF16 void RowTiles(const uint16_t* x, int64_t ldx, int64_t rows, const uint16_t* w,
                             int64_t k, int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  int64_t t = 0;
  for (; t + 6 <= rows; t += 6)
    RowTile<6, 4, P>(x + t * ldx, ldx, w, k, n_begin, n_end, y + t * ldy, ldy);
  for (; t + 4 <= rows; t += 4)
    RowTile<4, 4, P>(x + t * ldx, ldx, w, k, n_begin, n_end, y + t * ldy, ldy);
  for (; t + 2 <= rows; t += 2)
    RowTile<2, 8, P>(x + t * ldx, ldx, w, k, n_begin, n_end, y + t * ldy, ldy);
  for (; t < rows; ++t) RowTile<1, 8, P>(x + t * ldx, ldx, w, k, n_begin, n_end, y + t * ldy, ldy);
}

// One row of x (batch-1 decode): the thread's weight rows in quarters walked side by side, one row
// of each at a time, with no software prefetch: four sequential streams, which the hardware
// prefetcher follows. On an AVX-512 EPYC this read 1.2-1.5x faster than the 8-row tiles with
// prefetches, four streams a little faster than two (docs/perf/engine.md#batch-1-decode-streams).
EXA_AVX512BF16 void DecodeRow(const uint16_t* x, const uint16_t* w, int64_t k, int64_t n_begin,
                              int64_t n_end, float* y) {
  WalkSpread<4>(
      n_begin, n_end,
      [&](int64_t n, int64_t span)
          EXA_AVX512BF16 { Block<1, 4, false>(x, 0, w, k, n, y, 0, span); },
      [&](int64_t n) EXA_AVX512BF16 { Block<1, 1, false>(x, 0, w, k, n, y, 0); });
}

// Weight strips of about this many bytes stay in L2 while a tile of x rows passes them.
constexpr int64_t kStripBytes = 256 << 10;

EXA_AVX512BF16 void MatMulImpl(const uint16_t* x, int64_t ldx, int64_t rows, const uint16_t* w,
                               int64_t k, int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  if (rows == 1) return DecodeRow(x, w, k, n_begin, n_end, y);
  constexpr int64_t kRowTile = 64;
  const int64_t col_tile = std::clamp<int64_t>(kStripBytes / (k * 2) / 4 * 4, 4, 128);
  for (int64_t r0 = 0; r0 < rows; r0 += kRowTile) {
    const int64_t r1 = std::min(rows, r0 + kRowTile);
    for (int64_t c0 = n_begin; c0 < n_end; c0 += col_tile) {
      const int64_t c1 = std::min(n_end, c0 + col_tile);
      if (rows <= kPrefetchMaxRows) {
        RowTiles<true>(x + r0 * ldx, ldx, r1 - r0, w, k, c0, c1, y + r0 * ldy, ldy);
      } else {
        RowTiles<false>(x + r0 * ldx, ldx, r1 - r0, w, k, c0, c1, y + r0 * ldy, ldy);
      }
    }
  }
}

EXA_AVX512BF16 void PackImpl(const float* x, int64_t ldx, int64_t rows, int64_t k,
                             uint16_t* packed) {
  const int64_t stride = PackedBf16Stride(k);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    uint16_t* out = packed + r * stride;
    for (int64_t i = 0; i < stride; i += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(Mask16(k - i), xr + i);
      const __m512 hi = _mm512_maskz_loadu_ps(Mask16(k - i - 16), xr + i + 16);
      _mm512_storeu_si512(out + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

}  // namespace

void PackBf16InputAvx512Bf16(const float* x, int64_t ldx, int64_t rows, int64_t k,
                             uint16_t* packed) {
  PackImpl(x, ldx, rows, k, packed);
}

void MatMulAvx512Bf16(const uint16_t* x, int64_t ldx, int64_t rows, const uint16_t* w, int64_t k,
                      int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  MatMulImpl(x, ldx, rows, w, k, n_begin, n_end, y, ldy);
}

}  // namespace exa::engine::cpu::internal
