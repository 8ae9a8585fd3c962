// The chat-template corpus's seeds parse and render, or their mutations (corpus_runner.cc: every
// input parses or fails with a Status, and a parsed one renders or fails with a Status) would
// mostly test the parser's first error.
#include <catch2/catch.hpp>

#include "chat_template/chat_template.h"
#include "fuzz_corpus_params.h"
#include "support/fuzz_corpus.h"

namespace {

TEST_CASE("chat template fuzz seeds parse and render") {
  auto vars = exa::chat_template::Value::FromJson(nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})"));
  int files = 0;
  for (const auto& [name, seed] : exa::testing::ReadCorpus(exa::testing::fuzz_params::kCorpusDir)) {
    ++files;
    auto parsed = exa::chat_template::Template::Parse(seed);
    REQUIRE(parsed.ok());
    CHECK((*parsed)->Render(vars.entries()).ok());
  }
  CHECK(files >= 5);
}

}  // namespace
