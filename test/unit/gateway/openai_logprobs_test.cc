// Log-probabilities in OpenAI's two shapes: the chat shape lists each token with its bytes and
// exactly its position's alternatives; the legacy shape maps the alternatives and the chosen
// token, and its text offsets continue from one stream chunk to the next; JSON never gets an
// infinity.
#include "gateway/openai_logprobs.h"

#include <catch2/catch.hpp>

#include <limits>

#include "engine/tokenizer_detokenizer.h"

namespace exa::gateway {
namespace {

using json = nlohmann::json;

struct Tiny {
  Tiny() {
    auto loaded = engine::LoadDetokenizer(EXA_SOURCE_DIR "/models/exa-tiny-arith");
    REQUIRE(loaded.ok());
    detokenizer = *loaded;
    one = tokenizer().Encode("1", false).at(0);
    two = tokenizer().Encode("2", false).at(0);
    plus = tokenizer().Encode("+", false).at(0);
  }
  const engine::Tokenizer& tokenizer() const { return detokenizer->tokenizer(); }
  std::shared_ptr<const engine::TokenizerDetokenizer> detokenizer;
  int32_t one = 0, two = 0, plus = 0;
};

TEST_CASE("The chat shape: token, logprob, UTF-8 bytes and exactly the alternatives") {
  Tiny t;
  std::vector<TokenLogprob> tokens = {{t.one, -0.5f, {{t.one, -0.5f}, {t.two, -1.5f}}},
                                      {t.plus, -0.25f, {}}};
  json out = ChatLogprobs(tokens, t.tokenizer());
  REQUIRE(out["content"].size() == 2);
  const json& first = out["content"][0];
  CHECK(first["token"] == "1");
  CHECK(first["logprob"] == -0.5);
  CHECK(first["bytes"] == json::array({int{'1'}}));
  REQUIRE(first["top_logprobs"].size() == 2);
  CHECK(first["top_logprobs"][1] ==
        json({{"token", "2"}, {"logprob", -1.5}, {"bytes", {int{'2'}}}}));
  CHECK(out["content"][1]["token"] == "+");
  CHECK(out["content"][1]["top_logprobs"] == json::array());
}

TEST_CASE("The legacy shape maps the alternatives and the chosen token; offsets continue") {
  Tiny t;
  // The chosen token is not among the alternatives (sampled below them): it is added.
  std::vector<TokenLogprob> tokens = {{t.two, -3.0f, {{t.one, -0.1f}}}, {t.plus, -0.2f, {}}};
  int64_t offset = 0;
  json out = LegacyLogprobs(tokens, t.tokenizer(), &offset);
  CHECK(out["tokens"] == json({"2", "+"}));
  CHECK(out["token_logprobs"] == json({-3.0, -0.2f}));
  CHECK(out["top_logprobs"][0] == json({{"1", -0.1f}, {"2", -3.0}}));
  CHECK(out["top_logprobs"][1] == json({{"+", -0.2f}}));
  CHECK(out["text_offset"] == json({0, 1}));
  CHECK(offset == 2);
  // The next chunk of a stream starts where this one ended.
  json next = LegacyLogprobs(std::vector<TokenLogprob>{{t.one, -1.0f, {}}}, t.tokenizer(), &offset);
  CHECK(next["text_offset"] == json({2}));
  CHECK(offset == 3);
}

TEST_CASE("A token the sampler can never draw gets vLLM's -9999, not an invalid JSON number") {
  Tiny t;
  const float never = -std::numeric_limits<float>::infinity();
  std::vector<TokenLogprob> tokens = {{t.one, never, {{t.two, never}}}};
  json chat = ChatLogprobs(tokens, t.tokenizer());
  CHECK(chat["content"][0]["logprob"] == -9999.0);
  CHECK(chat["content"][0]["top_logprobs"][0]["logprob"] == -9999.0);
  int64_t offset = 0;
  CHECK(LegacyLogprobs(tokens, t.tokenizer(), &offset)["token_logprobs"][0] == -9999.0);
}

}  // namespace
}  // namespace exa::gateway
