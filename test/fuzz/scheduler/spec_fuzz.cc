// libFuzzer entry for the InferenceReplica spec parser (docs/testing.md): any text either fails
// with a Status or yields specs that pass ValidateSpec and survive a round trip through canonical
// YAML. Built with clang -fsanitize=fuzzer it fuzzes; in ctest its seed corpus and deterministic
// mutations run through corpus_test.cc.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "scheduler/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto specs = exa::scheduler::ParseSpecs(text, "fuzz.yaml");
  if (!specs.ok()) return 0;
  for (const auto& spec : *specs) {
    if (!exa::scheduler::ValidateSpec(spec).ok()) std::abort();
    std::string canonical = exa::scheduler::SpecToYaml(spec);
    auto again = exa::scheduler::ParseSpecs(canonical, "canonical");
    if (!again.ok() || again->size() != 1 || !(again->front() == spec)) {
      std::fprintf(stderr, "round trip failed for:\n%s\n%s\n", canonical.c_str(),
                   again.ok() ? "(differs)" : std::string(again.status().message()).c_str());
      std::abort();
    }
  }
  return 0;
}
