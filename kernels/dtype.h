// Element types the kernels read and write. Activations cross the Backend boundary as fp32
// (engine/backend.h); weights and the KV cache are stored in half precision (bf16 or fp16) and
// widened to fp32 in registers: every kernel accumulates in fp32.
#pragma once

#include <cstdint>
#include <string_view>

namespace exa::kernels {

enum class Dtype : uint8_t { kF32, kF16, kBF16 };

constexpr int64_t DtypeBytes(Dtype t) { return t == Dtype::kF32 ? 4 : 2; }

constexpr std::string_view DtypeName(Dtype t) {
  switch (t) {
    case Dtype::kF32:
      return "f32";
    case Dtype::kF16:
      return "f16";
    case Dtype::kBF16:
      return "bf16";
  }
  return "?";
}

}  // namespace exa::kernels
