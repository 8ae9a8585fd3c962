// What the AVX-512 kernels share (docs/architecture.md#cpu-backend), included by
// kernels_avx512.cc and kernels_avx512bf16.cc under their target attributes: tail masks, and the
// final reduction of the accumulators. Every output's 16 lanes are summed in one fixed tree, the
// one GCC's _mm512_reduce_add_ps uses (lane i + lane i+8, then + i+4, then + i+2, then + i+1),
// whether it is reduced alone or four at a time, so a result does not depend on the tile that
// produced it.
//
// Thread safety: pure functions.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace exa::engine::cpu::internal {

#define EXA_AVX512_SUMS __attribute__((target("avx512f,avx512vl,avx512bw"), always_inline))

// The first n of 16 / 32 lanes.
inline __mmask16 Mask16(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}
inline __mmask32 Mask32(int64_t n) {
  if (n <= 0) return 0;
  return n >= 32 ? 0xffffffffu : (1u << n) - 1;
}

// y[0..3] = the sums of a, b, c and d: 14 instructions instead of 4 x 8.
EXA_AVX512_SUMS inline void Sum4(__m512 a, __m512 b, __m512 c, __m512 d, float* y) {
  // 256-bit halves: lanes 0-7 hold a's lane i + i+8, lanes 8-15 b's (likewise c and d).
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
  // 128-bit quarters: quarter q holds the q-th input's 4 partial sums.
  const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 p = _mm512_add_ps(q, _mm512_permute_ps(q, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 s = _mm512_add_ps(p, _mm512_permute_ps(p, _MM_SHUFFLE(2, 3, 0, 1)));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  y[0] = lanes[0];
  y[1] = lanes[4];
  y[2] = lanes[8];
  y[3] = lanes[12];
}

// y[t * ldy + j * ldj] = the sum of acc[t][j], for a TR x NR register tile.
template <int TR, int NR>
EXA_AVX512_SUMS inline void StoreSums(const __m512 (&acc)[TR][NR], float* y, int64_t ldy,
                                      int64_t ldj = 1) {
#pragma GCC unroll 8
  for (int t = 0; t < TR; ++t) {
    int j = 0;
    if (ldj == 1) {
#pragma GCC unroll 8
      for (; j + 4 <= NR; j += 4) {
        Sum4(acc[t][j], acc[t][j + 1], acc[t][j + 2], acc[t][j + 3], y + t * ldy + j);
      }
    }
#pragma GCC unroll 8
    for (; j < NR; ++j) y[t * ldy + j * ldj] = _mm512_reduce_add_ps(acc[t][j]);
  }
}

}  // namespace exa::engine::cpu::internal
