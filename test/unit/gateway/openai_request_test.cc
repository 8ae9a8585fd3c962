// ParseOpenAiRequest: n, prompt batches and log-probabilities are read as OpenAI defines them
// and bounded, every refusal naming the field and what is allowed; ChoiceRequests orders the
// choices as OpenAI indexes them and gives each sample its own seed.
#include "gateway/openai_request.h"

#include <catch2/catch.hpp>

#include "common/strings.h"

namespace exa::gateway {
namespace {

using json = nlohmann::json;

OpenAiRequest Parse(const json& body, bool chat = false) {
  OpenAiRequest out;
  auto error = ParseOpenAiRequest(body.dump(), chat, &out);
  INFO(body.dump());
  REQUIRE_FALSE(error.has_value());
  return out;
}

ApiError Refuse(const json& body, bool chat = false) {
  OpenAiRequest out;
  auto error = ParseOpenAiRequest(body.dump(), chat, &out);
  INFO(body.dump());
  REQUIRE(error.has_value());
  CHECK(error->status == 400);
  return *error;
}

const json kChat = {{"messages", {{{"role", "user"}, {"content", "1+1="}}}}};

json ChatWith(const json& extra) {
  json body = kChat;
  body.update(extra);
  return body;
}

TEST_CASE("n is 1 to 16; above, a 400 naming n and the bound") {
  CHECK(Parse({{"prompt", "1+1="}}).n == 1);
  CHECK(Parse({{"prompt", "1+1="}, {"n", 16}}).n == 16);
  CHECK(Parse(ChatWith({{"n", 3}}), true).n == 3);
  for (const json& n : {json(0), json(17), json(-1), json("2"), json(1.5)}) {
    ApiError e = Refuse({{"prompt", "1+1="}, {"n", n}});
    CHECK(e.param == "n");
    CHECK(e.message.find("[1, 16]") != std::string::npos);
  }
}

TEST_CASE("A completions prompt is a string, token ids, or a batch of either") {
  OpenAiRequest one = Parse({{"prompt", "1+1="}, {"max_tokens", 3}});
  REQUIRE(one.prompts.size() == 1);
  CHECK(one.prompts[0].prompt == "1+1=");
  CHECK(one.prompts[0].max_tokens == 3);
  OpenAiRequest ids = Parse({{"prompt", json::parse("[5, 6, 7]")}});
  REQUIRE(ids.prompts.size() == 1);
  CHECK(ids.prompts[0].prompt_tokens == std::vector<int32_t>{5, 6, 7});
  OpenAiRequest strings =
      Parse({{"prompt", json::parse(R"(["1+1=", "2+2="])")}, {"temperature", 0.5}});
  REQUIRE(strings.prompts.size() == 2);
  CHECK(strings.prompts[1].prompt == "2+2=");
  CHECK(strings.prompts[1].sampling.temperature == 0.5f);  // every prompt shares the fields
  OpenAiRequest lists = Parse({{"prompt", json::parse("[[1, 2], [3]]")}});
  REQUIRE(lists.prompts.size() == 2);
  CHECK(lists.prompts[1].prompt_tokens == std::vector<int32_t>{3});
}

TEST_CASE("Prompt batches are bounded and malformed ones name prompt") {
  CHECK(Parse({{"prompt", std::vector<std::string>(32, "1")}}).prompts.size() == 32);
  ApiError many = Refuse({{"prompt", std::vector<std::string>(33, "1")}});
  CHECK(many.param == "prompt");
  CHECK(many.message == "prompt: 33 prompts; at most 32 in one request");
  for (const char* bad : {"[]", "[[1], []]", R"([{"a": 1}])", R"([1, "a"])", "7", "[[[1]]]", "[-1]",
                          "[4294967296]"}) {
    CHECK(Refuse({{"prompt", json::parse(bad)}}).param == "prompt");
  }
  // prompts × n past 64 choices: refused naming n.
  ApiError choices = Refuse({{"prompt", std::vector<std::string>(5, "1")}, {"n", 13}});
  CHECK(choices.param == "n");
  CHECK(choices.message == "n: 5 prompts × n 13 = 65 choices; at most 64 in one request");
}

TEST_CASE("Chat logprobs: a boolean and up to 20 alternatives, which need logprobs true") {
  OpenAiRequest r = Parse(ChatWith({{"logprobs", true}, {"top_logprobs", 20}}), true);
  CHECK(r.logprobs == LogprobsShape::kChat);
  CHECK(r.top_logprobs == 20);
  CHECK(r.prompts[0].sampling.logprobs);
  CHECK(r.prompts[0].sampling.top_logprobs == 20);
  CHECK(Parse(ChatWith({{"logprobs", false}}), true).logprobs == LogprobsShape::kNone);
  CHECK_FALSE(Parse(kChat, true).prompts[0].sampling.logprobs);
  ApiError over = Refuse(ChatWith({{"logprobs", true}, {"top_logprobs", 21}}), true);
  CHECK(over.param == "top_logprobs");
  CHECK(over.message == "top_logprobs: 21 is outside [0, 20]");
  CHECK(Refuse(ChatWith({{"top_logprobs", 2}}), true).param == "top_logprobs");
  CHECK(Refuse(ChatWith({{"logprobs", 2}}), true).param == "logprobs");
}

TEST_CASE("Completions logprobs: one count, 0 to 20, in the legacy shape") {
  OpenAiRequest r = Parse({{"prompt", "1"}, {"logprobs", 0}});
  CHECK(r.logprobs == LogprobsShape::kLegacy);
  CHECK(r.top_logprobs == 0);
  CHECK(r.prompts[0].sampling.logprobs);
  CHECK(Parse({{"prompt", "1"}, {"logprobs", 5}}).top_logprobs == 5);
  CHECK(Parse({{"prompt", "1"}, {"logprobs", nullptr}}).logprobs == LogprobsShape::kNone);
  for (const json& bad : {json(21), json(true), json(-1)}) {
    ApiError e = Refuse({{"prompt", "1"}, {"logprobs", bad}});
    CHECK(e.param == "logprobs");
    CHECK(e.message.find("[0, 20]") != std::string::npos);
  }
  CHECK(Refuse({{"prompt", "1"}, {"top_logprobs", 3}}).param == "top_logprobs");
}

TEST_CASE("Chat requests name messages as their prompt field; fields are named as sent") {
  OpenAiRequest r = Parse(ChatWith({{"max_completion_tokens", 5}}), true);
  CHECK(r.prompts[0].prompt_field == "messages");
  CHECK(r.prompts[0].max_tokens_field == "max_completion_tokens");
  CHECK(Parse({{"prompt", "1"}}).prompts[0].prompt_field == "prompt");
  CHECK(Refuse({{"prompt", "1"}, {"echo", true}}).param == "echo");
  CHECK(Refuse({{"prompt", "1"}, {"stream", "yes"}}).param == "stream");
  CHECK(Refuse({{"prompt", "1"}, {"model", 3}}).param == "model");
  OpenAiRequest out;
  auto e = ParseOpenAiRequest("{", false, &out);
  REQUIRE(e.has_value());
  CHECK(e->param.empty());
}

TEST_CASE("Choices come in OpenAI's order, each sample of a prompt with its own seed") {
  OpenAiRequest r = Parse({{"prompt", json::parse(R"(["a", "b"])")}, {"n", 3}, {"seed", 100}});
  CHECK(r.seeded);
  std::vector<TextRequest> choices = ChoiceRequests(r, 100);
  REQUIRE(choices.size() == 6);
  for (size_t i = 0; i < choices.size(); ++i) {
    INFO(i);
    CHECK(choices[i].prompt == (i < 3 ? "a" : "b"));  // prompt i: choices i*n .. i*n+n-1
    CHECK(choices[i].sampling.seed == 100 + i % 3);
  }
  CHECK_FALSE(Parse({{"prompt", "a"}}).seeded);
}

}  // namespace
}  // namespace exa::gateway
