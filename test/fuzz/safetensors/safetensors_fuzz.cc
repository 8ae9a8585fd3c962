// libFuzzer entry for the safetensors header parser (docs/testing.md): any byte string either fails
// with a Status or yields views that lie inside the input, and reading every byte of every
// view stays in bounds (ASan checks it). Built with clang -fsanitize=fuzzer it fuzzes; in ctest
// its seed corpus and deterministic mutations run through corpus_test.cc.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tensors = exa::engine::ParseSafetensors(data, size, "fuzz.safetensors");
  if (!tensors.ok()) return 0;
  for (const auto& [name, view] : *tensors) {
    const auto* begin = static_cast<const uint8_t*>(view.data);
    if (begin < data || begin + view.bytes > data + size) std::abort();
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < view.bytes; ++i) sink = sink ^ begin[i];
    if (static_cast<size_t>(view.NumElements()) * exa::engine::DTypeBytes(view.dtype) !=
        view.bytes) {
      std::abort();
    }
  }
  return 0;
}
