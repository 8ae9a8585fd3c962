// Which instruction set the CPU kernels use (docs/architecture.md#cpu-backend). The level is
// detected once per process from CPUID and the OS's saved register state, and every kernel
// dispatches on it; the binary is built for baseline x86-64, with each vector path compiled under
// its own function target attributes, so it runs on any x86-64 CPU.
//
// Thread safety: ActiveIsa() may be called from any thread. ForceIsa() is for tests and
// benchmarks: call it while no kernel runs.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace exa::engine::cpu {

// Ordered: each level's CPU also has everything the levels below need.
enum class Isa {
  kScalar,      // portable C++
  kAvx2,        // AVX2 + FMA + F16C, 8 fp32 lanes
  kAvx512,      // AVX-512 F/BW/VL (+ FMA, F16C), 16 fp32 lanes
  kAvx512Bf16,  // kAvx512 plus AVX512-BF16 (vdpbf16ps, vcvtne2ps2bf16)
};

std::string_view IsaName(Isa isa);
// Parses IsaName()'s spellings; nullopt for anything else.
std::optional<Isa> ParseIsa(std::string_view name);

// The best level this CPU and OS support.
Isa DetectedIsa();
// Every level this machine can run, lowest first (always starts with kScalar).
std::vector<Isa> SupportedIsas();
// The level the kernels use now: DetectedIsa() unless forced lower.
Isa ActiveIsa();
// Makes the kernels use `isa` (nullopt: back to DetectedIsa()). Returns false, changing nothing,
// when this machine cannot run `isa`.
bool ForceIsa(std::optional<Isa> isa);

}  // namespace exa::engine::cpu
