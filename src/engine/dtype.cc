#include "engine/dtype.h"

#include <cmath>

namespace exa::engine {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

std::optional<DType> ParseDType(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return std::nullopt;
}

uint16_t F32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if (std::isnan(f)) return sign | 0x7e00u;
  float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00u;
  if (a < 6.103515625e-05f) {  // subnormal half: scale into the integer mantissa
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  uint32_t abits = bits & 0x7fffffffu;
  uint32_t mant = abits & 0x7fffffu;
  int32_t exp = static_cast<int32_t>(abits >> 23) - 127 + 15;
  uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // round to nearest even
  return sign | static_cast<uint16_t>(half);
}

}  // namespace exa::engine
