// The safetensors fuzz target survives its seed corpus and deterministic mutations of it
// (every truncation, byte flips, deletions, spliced ranges): each input parses or fails with a
// Status, never reading outside the input.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void Run(const std::string& input) {
  // A heap copy of exactly the input's size, so a sanitizer sees any overread.
  std::vector<uint8_t> copy(input.begin(), input.end());
  LLVMFuzzerTestOneInput(copy.data(), copy.size());
}

std::vector<std::string> Mutations(const std::string& seed, uint32_t rng_seed) {
  std::mt19937 rng(rng_seed);  // seeded: the same mutations on every run
  std::vector<std::string> out;
  for (size_t cut = 0; cut < seed.size(); ++cut) out.push_back(seed.substr(0, cut));
  const std::string specials = "{}[]\":,0123456789-eE \x80\xff";
  for (int i = 0; i < 400 && !seed.empty(); ++i) {
    std::string m = seed;
    const size_t at = rng() % m.size();
    switch (rng() % 4) {
      case 0:
        m[at] = specials[rng() % specials.size()];
        break;
      case 1:
        m.erase(at, 1 + rng() % 8);
        break;
      case 2:
        m.insert(at, m.substr(rng() % m.size(), 1 + rng() % 16));
        break;
      default:
        m[at] = static_cast<char>(rng());
        break;
    }
    out.push_back(std::move(m));
  }
  return out;
}

TEST_CASE("safetensors fuzz corpus and its mutations parse or fail cleanly") {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(EXA_SAFETENSORS_FUZZ_CORPUS_DIR)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string seed = buffer.str();
    Run(seed);
    for (const std::string& m : Mutations(seed, static_cast<uint32_t>(files))) Run(m);
    ++files;
  }
  CHECK(files >= 4);
}

}  // namespace
