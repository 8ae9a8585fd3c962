// Proves the AVX2/FMA/F16C kernels agree with the scalar fallback for every weight dtype, odd
// sizes (K not a multiple of 8, N not a multiple of the block) and every row-tile shape, and that
// a row's result does not depend on how many rows share the call (batch invariance).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/dtype.h"

namespace exa::engine::cpu {
namespace {

struct Weights {
  std::vector<uint8_t> bytes;
  DType dtype;
};

Weights RandomWeights(DType dtype, int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Weights w{std::vector<uint8_t>(n * k * DTypeBytes(dtype)), dtype};
  for (int64_t i = 0; i < n * k; ++i) {
    const float f = dist(rng);
    if (dtype == DType::kF32) {
      std::memcpy(w.bytes.data() + 4 * i, &f, 4);
    } else {
      const uint16_t h = dtype == DType::kF16 ? F32ToF16(f) : F32ToBf16(f);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
    }
  }
  return w;
}

std::vector<float> Run(const std::vector<float>& x, int64_t rows, const Weights& w, int64_t n,
                       int64_t k, bool scalar) {
  ForceScalarKernels(scalar);
  std::vector<float> y(rows * n, -1.0f);
  MatMulRange(x.data(), k, rows, w.bytes.data(), w.dtype, k, 0, n, y.data(), n);
  ForceScalarKernels(false);
  return y;
}

TEST_CASE("vector and scalar matmul kernels agree on every dtype and shape", "[engine][cpu]") {
  if (!UsingAvx2()) WARN("no AVX2 on this CPU: only the scalar kernel is exercised");
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t k : {1, 7, 8, 37, 256}) {
      const int64_t n = 19, rows = 11;  // exercises 4-, 2- and 1-row tiles and block tails
      Weights w = RandomWeights(dtype, n, k, rng);
      std::vector<float> x(rows * k);
      for (float& v : x) v = dist(rng);
      const auto fast = Run(x, rows, w, n, k, false);
      const auto slow = Run(x, rows, w, n, k, true);
      for (int64_t i = 0; i < rows * n; ++i) {
        INFO("dtype " << DTypeName(dtype) << " k " << k << " element " << i);
        CHECK(fast[i] == Approx(slow[i]).epsilon(1e-5).margin(1e-4));
      }
      // Batch invariance: each row alone gives bitwise the same result as within the batch.
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> one(x.begin() + r * k, x.begin() + (r + 1) * k);
        const auto alone = Run(one, 1, w, n, k, false);
        for (int64_t j = 0; j < n; ++j) CHECK(alone[j] == fast[r * n + j]);
      }
    }
  }
}

TEST_CASE("half conversions round-trip and handle edge values", "[engine][cpu]") {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    CHECK(F16ToF32(F32ToF16(f)) == f);
    CHECK(Bf16ToF32(F32ToBf16(f)) == Approx(f).epsilon(1e-2));
  }
  CHECK(std::isinf(F16ToF32(F32ToF16(1e6f))));
  CHECK(std::isnan(F16ToF32(F32ToF16(std::nanf("")))));
  uint16_t halves[8] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000, 0x7c00, 0x3555, 0x0400};
  float wide[8];
  ConvertRow(halves, DType::kF16, 8, wide);
  for (int i = 0; i < 8; ++i) CHECK(wide[i] == F16ToF32(halves[i]));
}

}  // namespace
}  // namespace exa::engine::cpu
