// Element types of model weights (the safetensors dtypes ExaServe loads) and their conversion to
// fp32. All arithmetic runs in fp32; half types are widened on load into registers.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace exa::engine {

enum class DType : uint8_t { kF32, kF16, kBF16 };

constexpr size_t DTypeBytes(DType t) { return t == DType::kF32 ? 4 : 2; }
std::string_view DTypeName(DType t);
// Parses a safetensors dtype string ("F32", "F16", "BF16"); nullopt for anything else.
std::optional<DType> ParseDType(std::string_view name);

inline float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Round-to-nearest-even, as PyTorch's .to(torch.bfloat16).
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// IEEE half to float, exact for every input including subnormals, inf and NaN.
inline float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int shift = 0;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      ++shift;
    }
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t F32ToF16(float f);

// Element i of `data` (in `dtype`) widened to fp32.
inline float ElementToF32(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(data)[i]);
  }
  return 0;
}

}  // namespace exa::engine
