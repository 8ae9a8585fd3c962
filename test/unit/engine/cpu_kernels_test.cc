// Proves every vector kernel path this CPU supports (AVX2, AVX-512, AVX512-BF16, each forced in
// turn) agrees with the scalar fallback for every weight dtype, odd sizes (K not a multiple of
// the vector width, N not a multiple of the block) and every row-tile shape, and that a row's
// result does not depend on how many rows share the call (batch invariance).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/cpu_isa.h"
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

// x times w on `isa`, issued as products of `cut` weight rows at a time (all n by default), as
// the backend splits a product over its threads.
std::vector<float> Run(const std::vector<float>& x, int64_t rows, const Weights& w, int64_t n,
                       int64_t k, Isa isa, bool round_x = false, int64_t cut = 0) {
  if (cut == 0) cut = n;
  REQUIRE(ForceIsa(isa));
  std::vector<float> y(rows * n, -1.0f);
  for (int64_t b = 0; b < n; b += cut) {
    MatMulRange(x.data(), k, rows, w.bytes.data(), w.dtype, k, b, std::min(n, b + cut), y.data(), n,
                round_x);
  }
  ForceIsa(std::nullopt);
  return y;
}

// One vector path against the scalar kernel, and its batch invariance, for one shape; with
// `round_x`, against the scalar kernel on x rounded to the weights' type by hand.
void CheckPath(Isa isa, DType dtype, int64_t rows, int64_t n, int64_t k, std::mt19937& rng,
               bool round_x = false) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Weights w = RandomWeights(dtype, n, k, rng);
  std::vector<float> x(rows * k);
  for (float& v : x) v = dist(rng);
  std::vector<float> rounded = x;
  if (round_x) {
    for (float& v : rounded) {
      v = dtype == DType::kBF16 ? Bf16ToF32(F32ToBf16(v)) : F16ToF32(F32ToF16(v));
    }
  }
  const auto fast = Run(x, rows, w, n, k, isa, round_x);
  const auto slow = Run(rounded, rows, w, n, k, Isa::kScalar);
  for (int64_t i = 0; i < rows * n; ++i) {
    INFO(IsaName(isa) << " dtype " << DTypeName(dtype) << " k " << k << " element " << i
                      << (round_x ? " x rounded" : ""));
    CHECK(fast[i] == Approx(slow[i]).epsilon(1e-5).margin(1e-4));
  }
  // Batch invariance: each row alone gives bitwise the same result as within the batch.
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> one(x.begin() + r * k, x.begin() + (r + 1) * k);
    const auto alone = Run(one, 1, w, n, k, isa, round_x);
    for (int64_t j = 0; j < n; ++j) {
      INFO(IsaName(isa) << " dtype " << DTypeName(dtype) << " k " << k << " row " << r);
      CHECK(alone[j] == fast[r * n + j]);
    }
  }
}

TEST_CASE("every vector path agrees with the scalar kernel on every dtype and shape",
          "[engine][cpu]") {
  const std::vector<Isa> isas = SupportedIsas();
  if (isas.back() < Isa::kAvx512Bf16) {
    WARN("this CPU runs up to " << IsaName(isas.back()) << ": the paths above are not exercised");
  }
  std::mt19937 rng(3);
  for (Isa isa : isas) {
    if (isa == Isa::kScalar) continue;
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      // 11 rows and 19 outputs exercise 6-, 4-, 2- and 1-row tiles and block tails; 70 rows
      // cross a row tile.
      for (int64_t k : {1, 7, 8, 17, 37, 64, 256, 300}) CheckPath(isa, dtype, 11, 19, k, rng);
      CheckPath(isa, dtype, 70, 37, 96, rng);
    }
  }
}

TEST_CASE("x rounded to bf16 for bf16 weights gives the same products on every path",
          "[engine][cpu]") {
  // On AVX512-BF16 this is the vdpbf16ps kernel; elsewhere the exact kernels on rounded x. 13
  // rows exercise its 6-, 4-, 2- and 1-row tiles; 70 rows cross a row tile.
  std::mt19937 rng(4);
  for (Isa isa : SupportedIsas()) {
    for (int64_t k : {1, 7, 17, 32, 33, 64, 300}) {
      CheckPath(isa, DType::kBF16, 13, 19, k, rng, /*round_x=*/true);
    }
    CheckPath(isa, DType::kBF16, 70, 37, 96, rng, /*round_x=*/true);
    // Rounding asks nothing of other dtypes: their products stay exact.
    CheckPath(isa, DType::kF16, 5, 9, 40, rng, /*round_x=*/false);
  }
}

TEST_CASE("a product split into ranges of weight rows gives bitwise the same outputs",
          "[engine][cpu]") {
  // The backend hands each thread a range of weight rows, and batch-1 decode walks a range in
  // halves or quarters side by side: where the range starts and how long it is must not change
  // any output, for one row of x or many.
  std::mt19937 rng(6);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  constexpr int64_t kN = 37, kK = 70;
  for (Isa isa : SupportedIsas()) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (bool round_x : {false, true}) {
        if (round_x && dtype != DType::kBF16) continue;
        const Weights w = RandomWeights(dtype, kN, kK, rng);
        for (int64_t rows : {1, 3}) {
          std::vector<float> x(rows * kK);
          for (float& v : x) v = dist(rng);
          const auto whole = Run(x, rows, w, kN, kK, isa, round_x);
          for (int64_t cut : {1, 2, 5, 9, 16, 23}) {  // ranges of 1..9 rows leave every remainder
            const auto y = Run(x, rows, w, kN, kK, isa, round_x, cut);
            for (int64_t i = 0; i < rows * kN; ++i) {
              INFO(IsaName(isa) << " dtype " << DTypeName(dtype) << (round_x ? " x rounded" : "")
                                << " rows " << rows << " ranges of " << cut << " element " << i);
              CHECK(y[i] == whole[i]);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("the kernel path can be forced to each supported level and no higher", "[engine][cpu]") {
  const std::vector<Isa> isas = SupportedIsas();
  REQUIRE(isas.front() == Isa::kScalar);
  CHECK(isas.back() == DetectedIsa());
  for (Isa isa : isas) {
    REQUIRE(ForceIsa(isa));
    CHECK(ActiveIsa() == isa);
    CHECK(ParseIsa(IsaName(isa)) == isa);
  }
  if (DetectedIsa() < Isa::kAvx512Bf16) {
    CHECK_FALSE(ForceIsa(Isa::kAvx512Bf16));
    CHECK(ActiveIsa() == isas.back());  // unchanged by the refused call
  }
  ForceIsa(std::nullopt);
  CHECK(ActiveIsa() == DetectedIsa());
  CHECK_FALSE(ParseIsa("avx1024").has_value());
}

TEST_CASE("silu saturates as exp does, without NaN", "[engine][cpu]") {
  // exp(-g) overflows to +inf for g below -88.7: silu is then -0, as the scalar formula gives.
  const std::vector<float> gate = {-1000.0f, -100.0f, -88.0f, -20.0f, 0.0f, 20.0f, 100.0f, 1000.0f};
  const std::vector<float> up(gate.size(), 2.0f);
  for (Isa isa : SupportedIsas()) {
    INFO(IsaName(isa));
    REQUIRE(ForceIsa(isa));
    std::vector<float> out(gate.size());
    SiluMul(gate.data(), up.data(), static_cast<int64_t>(gate.size()), out.data());
    for (size_t i = 0; i < gate.size(); ++i) {
      const double want = gate[i] / (1.0 + std::exp(-double{gate[i]})) * 2.0;
      CHECK(out[i] == Approx(want).epsilon(1e-6).margin(1e-30));
    }
  }
  ForceIsa(std::nullopt);
}

TEST_CASE("dot, axpy, silu and widening agree on every path", "[engine][cpu]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t n : {1, 15, 16, 33, 64, 100}) {
    std::vector<float> a(n), b(n);
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    std::vector<uint16_t> halves(n);
    for (int64_t i = 0; i < n; ++i) halves[i] = F32ToBf16(a[i]);
    double exact = 0;
    for (int64_t i = 0; i < n; ++i) exact += double{a[i]} * b[i];
    for (Isa isa : SupportedIsas()) {
      INFO(IsaName(isa) << " n " << n);
      REQUIRE(ForceIsa(isa));
      CHECK(DotF32(a.data(), b.data(), n) == Approx(exact).margin(1e-4));
      std::vector<float> y = b;
      Axpy(0.5f, a.data(), n, y.data());
      for (int64_t i = 0; i < n; ++i) CHECK(y[i] == Approx(b[i] + 0.5f * a[i]).margin(1e-6));
      std::vector<float> wide(n + 1, -7.0f);
      ConvertRow(halves.data(), DType::kBF16, n, wide.data());
      for (int64_t i = 0; i < n; ++i) CHECK(wide[i] == Bf16ToF32(halves[i]));
      CHECK(wide[n] == -7.0f);  // nothing written past the end
      std::vector<float> gated(n + 1, -7.0f);
      SiluMul(a.data(), b.data(), n, gated.data());
      for (int64_t i = 0; i < n; ++i) {
        const double silu = a[i] / (1.0 + std::exp(-double{a[i]}));
        CHECK(gated[i] == Approx(silu * b[i]).epsilon(1e-6).margin(1e-7));
      }
      CHECK(gated[n] == -7.0f);
    }
    ForceIsa(std::nullopt);
  }
}

// Attention of one head in double precision, the reference for AttendGroup.
std::vector<double> ReferenceAttention(const std::vector<float>& q, const std::vector<float>& kv,
                                       const std::vector<int32_t>& slots, int64_t stride,
                                       int64_t value_offset, int32_t dim, double scale) {
  std::vector<double> scores(slots.size()), out(dim, 0.0);
  double max_score = -1e300, sum = 0;
  for (size_t j = 0; j < slots.size(); ++j) {
    double s = 0;
    for (int32_t d = 0; d < dim; ++d) s += double{q[d]} * kv[slots[j] * stride + d];
    scores[j] = s * scale;
    max_score = std::max(max_score, scores[j]);
  }
  for (double& s : scores) sum += (s = std::exp(s - max_score));
  for (size_t j = 0; j < slots.size(); ++j) {
    for (int32_t d = 0; d < dim; ++d) {
      out[d] += scores[j] / sum * kv[value_offset + slots[j] * stride + d];
    }
  }
  return out;
}

TEST_CASE("attention of one head agrees with a double-precision reference on every path",
          "[engine][cpu]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (int32_t dim : {32, 48, 64, 128, 256}) {
    for (int32_t len : {1, 5, 16, 17, 300}) {
      const int64_t stride = dim + 8, slots_total = 512;  // rows wider than a head, like GQA
      std::vector<float> kv(2 * slots_total * stride), q(dim), scores(len), out(dim);
      for (float& v : kv) v = dist(rng);
      for (float& v : q) v = dist(rng);
      std::vector<int32_t> slots(len);
      for (int32_t& s : slots) s = static_cast<int32_t>(rng() % slots_total);
      const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
      const auto want = ReferenceAttention(q, kv, slots, stride, slots_total * stride, dim, scale);
      for (Isa isa : SupportedIsas()) {
        REQUIRE(ForceIsa(isa));
        AttendGroup(q.data(), 1, kv.data(), kv.data() + slots_total * stride, slots.data(), stride,
                    len, dim, static_cast<float>(scale), scores.data(), out.data());
        for (int32_t d = 0; d < dim; ++d) {
          INFO(IsaName(isa) << " dim " << dim << " len " << len << " element " << d);
          CHECK(out[d] == Approx(want[d]).epsilon(1e-5).margin(1e-5));
        }
      }
      ForceIsa(std::nullopt);
    }
  }
}

TEST_CASE("a query head's attention is the same alone as within its group", "[engine][cpu]") {
  // Groups of 2-8 heads take the grouped kernels (4, 2 and 1 heads at a time); each head's result
  // must be bitwise what it is alone, so a model's output does not depend on its grouping.
  std::mt19937 rng(12);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (int32_t dim : {32, 48, 64, 128, 256}) {
    for (int32_t heads : {2, 3, 4, 5, 7, 8}) {
      for (int32_t len : {1, 3, 6, 33}) {
        const int64_t stride = dim + 8, slots_total = 64;
        std::vector<float> kv(2 * slots_total * stride), q(heads * dim);
        for (float& v : kv) v = dist(rng);
        for (float& v : q) v = dist(rng);
        std::vector<int32_t> slots(len);
        for (int32_t& s : slots) s = static_cast<int32_t>(rng() % slots_total);
        const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
        for (Isa isa : SupportedIsas()) {
          REQUIRE(ForceIsa(isa));
          std::vector<float> scores(heads * len), together(heads * dim), alone(dim);
          AttendGroup(q.data(), heads, kv.data(), kv.data() + slots_total * stride, slots.data(),
                      stride, len, dim, scale, scores.data(), together.data());
          for (int32_t g = 0; g < heads; ++g) {
            AttendGroup(q.data() + g * dim, 1, kv.data(), kv.data() + slots_total * stride,
                        slots.data(), stride, len, dim, scale, scores.data(), alone.data());
            for (int32_t d = 0; d < dim; ++d) {
              INFO(IsaName(isa) << " dim " << dim << " heads " << heads << " len " << len
                                << " head " << g << " element " << d);
              CHECK(together[g * dim + d] == alone[d]);
            }
          }
        }
        ForceIsa(std::nullopt);
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
