// Inner loops of the CPU backend. Each has an AVX2/FMA/F16C version, chosen at run time when
// the CPU supports it (__builtin_cpu_supports), and a portable scalar fallback. Accumulation is
// fp32 whatever the weight dtype.
//
// Thread safety: pure functions over caller-owned memory.
#pragma once

#include <cstdint>

#include "engine/dtype.h"

namespace exa::engine::cpu {

// Whether the AVX2 + FMA + F16C kernels are in use (decided once per process).
bool UsingAvx2();
// Forces the scalar kernels (tests compare both paths); not thread-safe, call before use.
void ForceScalarKernels(bool force);

// y[t, n] = dot(x[t, :], w[n, :]) for t in [0, rows), n in [n_begin, n_end). x has row stride
// ldx, y row stride ldy, w is [*, k] in `dtype`. The result for one (t, n) does not depend on
// rows or on the n range.
void MatMulRange(const float* x, int64_t ldx, int64_t rows, const void* w, DType dtype, int64_t k,
                 int64_t n_begin, int64_t n_end, float* y, int64_t ldy);

// dst[i] = (float) src[i] for i in [0, n), src in `dtype`.
void ConvertRow(const void* src, DType dtype, int64_t n, float* dst);

// Returns dot(a, b) over n floats.
float DotF32(const float* a, const float* b, int64_t n);
// y[i] += alpha * x[i].
void Axpy(float alpha, const float* x, int64_t n, float* y);

}  // namespace exa::engine::cpu
