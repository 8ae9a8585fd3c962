// The tokenizer.json fuzz target survives its seed corpus and deterministic mutations of it
// (truncations, byte flips, spliced ranges): every input loads or fails with a Status, and a
// loaded tokenizer encodes and decodes without crashing. Sanitizer builds make this a memory
// check too.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int Run(const std::string& input) {
  return LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

std::vector<std::string> Mutations(const std::string& seed, uint32_t rng_seed) {
  std::mt19937 rng(rng_seed);  // Seeded: the same mutations on every run.
  std::vector<std::string> out;
  for (size_t cut = 0; cut < seed.size(); cut += 1 + seed.size() / 12)
    out.push_back(seed.substr(0, cut));
  const std::string specials = "{}[]\":,0-9eE\\u \x80\xFF";
  for (int i = 0; i < 48 && !seed.empty(); ++i) {
    std::string m = seed;
    const size_t at = rng() % m.size();
    switch (rng() % 4) {
      case 0:
        m[at] = specials[rng() % specials.size()];
        break;
      case 1:
        m.erase(at, 1 + rng() % 16);
        break;
      case 2:
        m.insert(at, m.substr(rng() % m.size(), 1 + rng() % 32));
        break;
      default:
        m[at] = static_cast<char>(rng());
        break;
    }
    out.push_back(std::move(m));
  }
  return out;
}

TEST_CASE("tokenizer.json fuzz corpus and its mutations load or fail cleanly") {
  namespace fs = std::filesystem;
  int files = 0;
  int loaded = 0;
  for (const auto& entry : fs::directory_iterator(EXA_TOKENIZER_FUZZ_CORPUS_DIR)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string seed = buffer.str();
    ++files;
    if (exa::engine::Tokenizer::FromJson(seed, "seed").ok()) ++loaded;
    CHECK(Run(seed) == 0);
    for (const std::string& m : Mutations(seed, static_cast<uint32_t>(files))) CHECK(Run(m) == 0);
  }
  CHECK(files >= 8);
  // The seeds for supported components must load, or the mutations test nothing useful.
  CHECK(loaded >= 7);
}

}  // namespace
