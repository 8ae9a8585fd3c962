// The safetensors fuzz target survives its seed corpus and deterministic mutations of it
// (every truncation, byte flips, deletions, spliced ranges): each input parses or fails with a
// Status, never reading outside the input.
#include <catch2/catch.hpp>

#include "support/fuzz_corpus.h"

namespace {

TEST_CASE("safetensors fuzz corpus and its mutations parse or fail cleanly") {
  exa::testing::MutationOptions options;
  options.count = 400;
  options.specials = "{}[]\":,0123456789-eE \x80\xff";
  int files = 0;
  for (const auto& [name, seed] : exa::testing::ReadCorpus(EXA_SAFETENSORS_FUZZ_CORPUS_DIR)) {
    exa::testing::RunFuzzInput(seed);
    for (const std::string& m :
         exa::testing::Mutations(seed, static_cast<uint32_t>(files), options)) {
      exa::testing::RunFuzzInput(m);
    }
    ++files;
  }
  CHECK(files >= 4);
}

}  // namespace
