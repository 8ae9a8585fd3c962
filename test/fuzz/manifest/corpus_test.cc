// The manifest parser's fuzz target survives its seed corpus (valid manifests and known attacks:
// traversal, absolute paths, duplicates, huge sizes and chunk counts, deep nesting) and
// deterministic mutations of each.
#include <catch2/catch.hpp>

#include "support/fuzz_corpus.h"
#include "weights/manifest.h"

namespace exa::weights {
namespace {

TEST_CASE("Manifest fuzz corpus and its mutations parse or fail cleanly", "[fuzz]") {
  int files = 0, valid = 0;
  for (const auto& [name, seed] : exa::testing::ReadCorpus(EXA_MANIFEST_FUZZ_CORPUS_DIR)) {
    ++files;
    bool ok = ParseManifestJson(seed).ok();
    // Seeds named valid_* parse; every other seed is an attack that must be refused.
    INFO(name);
    CHECK(ok == (name.rfind("valid_", 0) == 0));
    if (ok) ++valid;
    exa::testing::RunFuzzInput(seed);
    for (const std::string& m : exa::testing::Mutations(seed, static_cast<uint32_t>(files),
                                                        {.count = 300, .truncation_step = 7})) {
      exa::testing::RunFuzzInput(m);
    }
  }
  CHECK(files >= 8);
  CHECK(valid >= 2);
}

}  // namespace
}  // namespace exa::weights
