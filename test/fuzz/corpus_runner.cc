// A fuzz target survives its committed seed corpus and deterministic mutations of every seed
// (truncations, byte flips, deletions, spliced ranges): each input returns 0 from
// LLVMFuzzerTestOneInput, never crashing or reading outside the input (sanitizer builds make this
// a memory check too). The parameters are the target's row in test/fuzz/CMakeLists.txt.
#include <cstdint>
#include <string>

#include <catch2/catch.hpp>

#include "fuzz_corpus_params.h"
#include "support/fuzz_corpus.h"

namespace exa::testing {
namespace {

TEST_CASE("Fuzz corpus and its mutations run cleanly", "[fuzz]") {
  MutationOptions options;
  options.count = fuzz_params::kMutations;
  options.specials = std::string(fuzz_params::kSpecials, sizeof(fuzz_params::kSpecials) - 1);
  int files = 0;
  for (const auto& [name, seed] : ReadCorpus(fuzz_params::kCorpusDir)) {
    INFO(name);
    ++files;
    options.truncation_step = fuzz_params::kTruncations > 0
                                  ? 1 + seed.size() / fuzz_params::kTruncations
                                  : fuzz_params::kTruncationStep;
    CHECK(RunFuzzInput(seed) == 0);
    for (const std::string& m : Mutations(seed, static_cast<uint32_t>(files), options)) {
      CHECK(RunFuzzInput(m) == 0);
    }
  }
  CHECK(files >= fuzz_params::kMinSeeds);
}

}  // namespace
}  // namespace exa::testing
