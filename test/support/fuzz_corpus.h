// Running a libFuzzer target's committed corpus as an ordinary Catch2 test (we build with g++,
// which has no libFuzzer driver): read the seed files, derive deterministic mutations of each
// (truncations, byte flips, deletions, spliced ranges), and feed everything to
// LLVMFuzzerTestOneInput, which the test binary links from the fuzz target's source.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace exa::testing {

// (file name, contents) of every file in `dir`, sorted by name so runs repeat exactly.
inline std::vector<std::pair<std::string, std::string>> ReadCorpus(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    files.emplace_back(entry.path().filename().string(), buffer.str());
  }
  std::sort(files.begin(), files.end());
  return files;
}

struct MutationOptions {
  int count = 200;             // random edits per seed
  size_t truncation_step = 1;  // every this many bytes, a prefix of the seed
  std::string specials;        // bytes a flip may write (empty: any byte)
};

inline std::vector<std::string> Mutations(const std::string& seed, uint32_t rng_seed,
                                          const MutationOptions& options = {}) {
  std::mt19937 rng(rng_seed);  // seeded: the same mutations on every run
  std::vector<std::string> out;
  for (size_t cut = 0; cut < seed.size(); cut += std::max<size_t>(1, options.truncation_step)) {
    out.push_back(seed.substr(0, cut));
  }
  for (int i = 0; i < options.count && !seed.empty(); ++i) {
    std::string m = seed;
    const size_t at = rng() % m.size();
    switch (rng() % 4) {
      case 0:
        m[at] = options.specials.empty() ? static_cast<char>(rng())
                                         : options.specials[rng() % options.specials.size()];
        break;
      case 1:
        m.erase(at, 1 + rng() % 8);
        break;
      case 2:
        m.insert(at, m.substr(rng() % m.size(), 1 + rng() % 16));
        break;
      default:
        m[at] = static_cast<char>(m[at] ^ (1 << (rng() % 8)));
        break;
    }
    out.push_back(std::move(m));
  }
  return out;
}

// Runs the target on a heap copy of exactly the input's size, so a sanitizer sees any overread.
inline int RunFuzzInput(const std::string& input) {
  std::vector<uint8_t> copy(input.begin(), input.end());
  return LLVMFuzzerTestOneInput(copy.data(), copy.size());
}

}  // namespace exa::testing
