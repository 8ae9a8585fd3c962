// The real tokenizers under test/data/tokenizer (Qwen 3, Llama 2, ...), loaded for tests that
// need a vocabulary.
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace exa::engine::testing {

// test/data/tokenizer/NAME.tokenizer.json; fails the test when it does not load.
inline std::unique_ptr<Tokenizer> LoadTestTokenizer(const std::string& name) {
  auto t = Tokenizer::FromFile(std::string(EXA_TOKENIZER_TEST_DATA_DIR) + "/" + name +
                               ".tokenizer.json");
  INFO(t.status().ToString());
  REQUIRE(t.ok());
  return *std::move(t);
}

}  // namespace exa::engine::testing
