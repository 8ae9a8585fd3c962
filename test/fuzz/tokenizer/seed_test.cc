// The tokenizer.json corpus's seeds for supported components load, or their mutations
// (corpus_runner.cc: every input loads or fails with a Status, and a loaded tokenizer encodes and
// decodes without crashing) would test nothing useful.
#include <catch2/catch.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "fuzz_corpus_params.h"
#include "support/fuzz_corpus.h"

namespace {

TEST_CASE("tokenizer.json fuzz seeds load") {
  int files = 0;
  int loaded = 0;
  for (const auto& [name, seed] : exa::testing::ReadCorpus(exa::testing::fuzz_params::kCorpusDir)) {
    ++files;
    if (exa::engine::Tokenizer::FromJson(seed, "seed").ok()) ++loaded;
  }
  CHECK(files >= 8);
  // The seeds for supported components must load, or the mutations test nothing useful.
  CHECK(loaded >= 7);
}

}  // namespace
