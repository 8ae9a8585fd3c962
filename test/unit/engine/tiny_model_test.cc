// Proves the bundled model answers the health probe (docs/architecture.md#health-checks: "1+1" must
// give "2") through the real path: tokenizer.json encode, CPU engine, greedy decode, streaming
// detokenizer.
#include <catch2/catch.hpp>

#include "engine/engine.h"
#include "engine/tokenizer_detokenizer.h"
#include "engine_test_util.h"

namespace exa::engine {
namespace {

const std::string kModel = EXA_SOURCE_DIR "/models/exa-tiny-arith";

TEST_CASE("the bundled model answers 1+1= with 2", "[engine][tiny]") {
  auto detok = LoadDetokenizer(kModel);
  REQUIRE(detok.ok());
  EngineOptions o;
  o.model_dir = kModel;
  o.threads = 2;
  o.kv_cache_bytes = 8 << 20;
  testing::Collector c;  // outlives the engine, whose thread calls it
  auto engine = CreateEngine(o, *detok);
  REQUIRE(engine.ok());
  const Tokenizer& tok = (*detok)->tokenizer();
  const std::vector<int32_t> prompt = tok.Encode("1+1=", /*add_special_tokens=*/true);
  REQUIRE(prompt.size() == 5);  // <s> 1 + 1 =: digits are one token each
  CHECK(prompt[0] == (*engine)->info().bos_token_id);

  const char* prompts[] = {"1+1=", "12+34=", "50+50="};
  const char* answers[] = {"2", "46", "100"};
  for (int i = 0; i < 3; ++i) {
    GenerateRequest r;
    r.prompt_tokens = tok.Encode(prompts[i], true);
    r.max_tokens = 8;
    r.callback = c.Callback(i);
    REQUIRE((*engine)->Submit(std::move(r)).ok());
  }
  REQUIRE(c.WaitFinished(3));
  for (int i = 0; i < 3; ++i) {
    INFO(prompts[i]);
    CHECK(c.Get(i).text == answers[i]);
    CHECK(c.Get(i).reason == FinishReason::kStop);  // ended by </s>, not by max_tokens
  }
}

}  // namespace
}  // namespace exa::engine
