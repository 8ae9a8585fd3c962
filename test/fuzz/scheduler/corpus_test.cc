// The spec parser's fuzz target survives its seed corpus and deterministic mutations of it:
// every input parses into valid specs that round-trip, or fails with a Status.
#include <catch2/catch.hpp>

#include "support/fuzz_corpus.h"

namespace {

TEST_CASE("spec fuzz corpus and its mutations parse or fail cleanly") {
  exa::testing::MutationOptions options;
  options.count = 300;
  options.specials = "{}[]:,-'\"#&*!|>\n 0123456789GiMsm";
  int files = 0;
  for (const auto& [name, seed] : exa::testing::ReadCorpus(EXA_SPEC_FUZZ_CORPUS_DIR)) {
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
