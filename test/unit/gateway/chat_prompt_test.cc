// PromptTokens: a chat request on a model with a chat template is prompted with the template's
// rendering, encoded without a second BOS; without a template (or with token ids) nothing
// changes; a template's raise_exception and an oversized rendering are errors naming messages.
#include "gateway/chat_prompt.h"

#include <catch2/catch.hpp>

#include "engine/tokenizer_detokenizer.h"

namespace exa::gateway {
namespace {

ModelView TinyModel(const std::string& template_source) {
  auto plain = engine::LoadDetokenizer(EXA_SOURCE_DIR "/models/exa-tiny-arith");
  REQUIRE(plain.ok());
  std::shared_ptr<const chat_template::ChatTemplate> chat_template;
  if (!template_source.empty()) {
    auto parsed = chat_template::ChatTemplate::FromTokenizerConfig(
        nlohmann::json({{"bos_token", "<s>"}, {"chat_template", template_source}}).dump());
    REQUIRE(parsed.ok());
    chat_template = *parsed;
  }
  auto tokenizer = std::shared_ptr<const engine::Tokenizer>(plain.value(), &(*plain)->tokenizer());
  return {"m", "v1", std::make_shared<engine::TokenizerDetokenizer>(tokenizer, chat_template), 256};
}

TextRequest Chat(const std::string& content, const std::string& role = "user") {
  TextRequest r;
  r.prompt = content;  // the fallback
  r.chat = nlohmann::ordered_json::parse(
      nlohmann::json(
          {{"messages", {{{"role", role}, {"content", content}}}}, {"add_generation_prompt", true}})
          .dump());
  return r;
}

constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}"
    "{{ raise_exception('no system messages') }}{% endif %}{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}={% endif %}";

TEST_CASE("a chat prompt is the template's rendering, with the template's BOS only") {
  ModelView model = TinyModel(kTemplate);
  TextRequest r = Chat("1+1");
  auto tokens = PromptTokens(r, model, 1 << 20);
  REQUIRE(tokens.ok());
  const engine::Tokenizer& tokenizer = model.tokenizer->tokenizer();
  CHECK(*tokens == tokenizer.Encode("<s>1+1=", false));
  CHECK(*tokens == tokenizer.Encode("1+1=", true));  // the post-processor's BOS, once
}

TEST_CASE("without a template, or with token ids, the prompt is as before") {
  ModelView model = TinyModel("");
  TextRequest r = Chat("1+1");
  auto tokens = PromptTokens(r, model, 1 << 20);
  REQUIRE(tokens.ok());
  CHECK(*tokens == model.tokenizer->tokenizer().Encode("1+1", true));
  TextRequest ids = Chat("1+1");
  ids.prompt_tokens = {5, 6};
  CHECK(*PromptTokens(ids, TinyModel(kTemplate), 1 << 20) == std::vector<int32_t>{5, 6});
}

TEST_CASE("raise_exception and an oversized rendering are errors on messages") {
  ModelView model = TinyModel(kTemplate);
  TextRequest system = Chat("be brief", "system");
  auto raised = PromptTokens(system, model, 1 << 20);
  REQUIRE(!raised.ok());
  CHECK(ErrorField(raised.status()) == "messages");
  CHECK(std::string(raised.status().message()).find("no system messages") != std::string::npos);
  TextRequest big = Chat(std::string(100, '1'));
  auto too_big = PromptTokens(big, model, 50);
  REQUIRE(!too_big.ok());
  CHECK(std::string(too_big.status().message()).find("larger than gateway.max_prompt_bytes") !=
        std::string::npos);
}

}  // namespace
}  // namespace exa::gateway
