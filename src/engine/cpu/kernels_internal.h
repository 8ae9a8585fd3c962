// The per-instruction-set implementations behind kernels.h, one translation unit each
// (kernels_avx2.cc, kernels_avx512.cc), each function compiled under its own target attribute so
// the baseline binary carries them all (docs/architecture.md#cpu-backend). Only kernels.cc calls
// these, after checking ActiveIsa().
//
// Thread safety: pure functions over caller-owned memory (scratch is thread_local).
#pragma once

#include <cstdint>

#include "engine/dtype.h"

namespace exa::engine::cpu::internal {

// Weight rows stream from memory once per decode step, several at a time (one per register
// block row): the tiles prefetch each row this far ahead of the load, since one core's hardware
// prefetchers do not keep up with that many interleaved rows
// (docs/perf/engine.md#on-an-avx512-bf16-machine). Batch-1 decode walks fewer streams where that
// measured faster, and does not prefetch (WalkSpread).
inline constexpr int64_t kPrefetchBytes = 512;
// gelu_tanh(g) = g / (1 + exp(-u)), u = g (kGeluTanhA + kGeluTanhB g^2): 2 sqrt(2/pi) and
// 2 sqrt(2/pi) 0.044715 (GeluTanhMul, kernels.h).
inline constexpr float kGeluTanhA = 1.5957691216057308f;
inline constexpr float kGeluTanhB = 0.07135481627260025f;
// Only for products of at most this many rows of x (decode batches): with more, a strip of weights
// is reused from L2 and prefetching it again only costs issue slots.
inline constexpr int64_t kPrefetchMaxRows = 32;
// Prefetches the line `kPrefetchBytes` past element `i` of weights `w` of `bytes` each (a hint:
// an address past the end does not fault).
inline void PrefetchAhead(const void* w, int64_t i, int64_t bytes) {
  __builtin_prefetch(static_cast<const char*>(w) + i * bytes + kPrefetchBytes, 0, 3);
}

// Weight rows [n_begin, n_end) as NR equal parts walked side by side: spread(n, span) for each n of
// the first part (it takes rows n, n + span, ... n + (NR - 1) span), then one(n) for each row left
// over. For batch-1 decode: NR sequential streams, which the hardware prefetcher follows, instead
// of NR adjacent rows (docs/perf/engine.md#batch-1-decode-streams).
template <int NR, typename Spread, typename One>
inline void WalkSpread(int64_t n_begin, int64_t n_end, Spread spread, One one) {
  const int64_t span = (n_end - n_begin) / NR;
  for (int64_t n = n_begin; n < n_begin + span; ++n) spread(n, span);
  for (int64_t n = n_begin + NR * span; n < n_end; ++n) one(n);
}

// AVX2 + FMA + F16C, 8 lanes.
void MatMulAvx2(const float* x, int64_t ldx, int64_t rows, const void* w, DType dtype, int64_t k,
                int64_t n_begin, int64_t n_end, float* y, int64_t ldy);
void ConvertAvx2(const void* src, DType dtype, int64_t n, float* dst);
float DotAvx2(const float* a, const float* b, int64_t n);
void AxpyAvx2(float alpha, const float* x, int64_t n, float* y);

// AVX-512, 16 lanes. Bf16 weights take x packed by PackBf16RowsAvx512 (row stride
// PackedBf16Stride(k)); f32 and f16 weights take x as it is.
int64_t PackedBf16Stride(int64_t k);
void PackBf16RowsAvx512(const float* x, int64_t ldx, int64_t rows, int64_t k, float* packed);
void MatMulAvx512(const float* x, int64_t ldx, int64_t rows, const void* w, DType dtype, int64_t k,
                  int64_t n_begin, int64_t n_end, float* y, int64_t ldy);
void ConvertAvx512(const void* src, DType dtype, int64_t n, float* dst);
float DotAvx512(const float* a, const float* b, int64_t n);
void AxpyAvx512(float alpha, const float* x, int64_t n, float* y);
// SiluMul (kernels.h).
void SiluMulAvx512(const float* gate, const float* up, int64_t n, float* out);
// GeluTanhMul (kernels.h).
void GeluTanhMulAvx512(const float* gate, const float* up, int64_t n, float* out);
// AttendGroup (kernels.h) for head_dim 32, 64, 128 or 256; returns false, doing nothing,
// otherwise.
bool AttendGroupAvx512(const float* q, int32_t heads, const float* keys, const float* values,
                       const int32_t* slots, int64_t slot_stride, int32_t len, int32_t head_dim,
                       float scale, float* scores, float* out, float softcap);

// AVX512-BF16: bf16 weights against x rounded to bf16 (vdpbf16ps). x is packed by
// PackBf16InputAvx512Bf16: each row rounded to bf16 and zero-padded to PackedBf16Stride(k).
void PackBf16InputAvx512Bf16(const float* x, int64_t ldx, int64_t rows, int64_t k,
                             uint16_t* packed);
void MatMulAvx512Bf16(const uint16_t* x, int64_t ldx, int64_t rows, const uint16_t* w, int64_t k,
                      int64_t n_begin, int64_t n_end, float* y, int64_t ldy);

}  // namespace exa::engine::cpu::internal
