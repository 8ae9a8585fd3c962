#include "engine/cpu/cpu_isa.h"

#include <atomic>

#include "common/logging.h"

namespace exa::engine::cpu {
namespace {

Isa Detect() {
  __builtin_cpu_init();
  // libgcc sets the AVX-512 bits only when XCR0 says the OS saves the ZMM state.
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (!avx2) return Isa::kScalar;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  if (!avx512) return Isa::kAvx2;
  return __builtin_cpu_supports("avx512bf16") ? Isa::kAvx512Bf16 : Isa::kAvx512;
}

Isa DetectOnce() {
  static const Isa detected = [] {
    const Isa isa = Detect();
    EXA_LOG_INFO("engine", "cpu kernels", {{"isa", std::string(IsaName(isa))}});
    return isa;
  }();
  return detected;
}

std::atomic<int> forced{-1};  // an Isa, or -1 for none

}  // namespace

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "unknown";
}

std::optional<Isa> ParseIsa(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (IsaName(isa) == name) return isa;
  }
  return std::nullopt;
}

Isa DetectedIsa() { return DetectOnce(); }

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(DetectedIsa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

Isa ActiveIsa() {
  const int f = forced.load(std::memory_order_relaxed);
  return f < 0 ? DetectedIsa() : static_cast<Isa>(f);
}

bool ForceIsa(std::optional<Isa> isa) {
  if (isa.has_value() && *isa > DetectedIsa()) return false;
  forced.store(isa.has_value() ? static_cast<int>(*isa) : -1);
  return true;
}

}  // namespace exa::engine::cpu
