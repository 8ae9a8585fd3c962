// The manifest corpus's seeds (valid manifests and known attacks: traversal, absolute paths,
// duplicates, huge sizes and chunk counts, deep nesting) parse or are refused as their names say.
// corpus_runner.cc runs them and their mutations through the fuzz target.
#include <catch2/catch.hpp>

#include "fuzz_corpus_params.h"
#include "support/fuzz_corpus.h"
#include "weights/manifest.h"

namespace exa::weights {
namespace {

TEST_CASE("Manifest fuzz seeds parse or are refused as their names say", "[fuzz]") {
  int files = 0, valid = 0;
  for (const auto& [name, seed] : exa::testing::ReadCorpus(exa::testing::fuzz_params::kCorpusDir)) {
    ++files;
    bool ok = ParseManifestJson(seed).ok();
    // Seeds named valid_* parse; every other seed is an attack that must be refused.
    INFO(name);
    CHECK(ok == (name.rfind("valid_", 0) == 0));
    if (ok) ++valid;
  }
  CHECK(files >= 8);
  CHECK(valid >= 2);
}

}  // namespace
}  // namespace exa::weights
