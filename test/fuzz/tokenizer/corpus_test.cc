// The tokenizer.json fuzz target survives its seed corpus and deterministic mutations of it
// (truncations, byte flips, spliced ranges): every input loads or fails with a Status, and a
// loaded tokenizer encodes and decodes without crashing. Sanitizer builds make this a memory
// check too.
#include <catch2/catch.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "support/fuzz_corpus.h"

namespace {

TEST_CASE("tokenizer.json fuzz corpus and its mutations load or fail cleanly") {
  exa::testing::MutationOptions options;
  options.count = 48;
  options.specials = "{}[]\":,0-9eE\\u \x80\xFF";
  int files = 0;
  int loaded = 0;
  for (const auto& [name, seed] : exa::testing::ReadCorpus(EXA_TOKENIZER_FUZZ_CORPUS_DIR)) {
    ++files;
    options.truncation_step = 1 + seed.size() / 12;
    if (exa::engine::Tokenizer::FromJson(seed, "seed").ok()) ++loaded;
    CHECK(exa::testing::RunFuzzInput(seed) == 0);
    for (const std::string& m :
         exa::testing::Mutations(seed, static_cast<uint32_t>(files), options)) {
      CHECK(exa::testing::RunFuzzInput(m) == 0);
    }
  }
  CHECK(files >= 8);
  // The seeds for supported components must load, or the mutations test nothing useful.
  CHECK(loaded >= 7);
}

}  // namespace
