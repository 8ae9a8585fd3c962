// PromptTokens: a chat request on a model with a chat template is prompted with the template's
// rendering, encoded without a second BOS; without a template (or with token ids) nothing
// changes; a template's raise_exception and an oversized rendering are errors naming messages.
#include "gateway/chat_prompt.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

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

// A model directory: the bundled model's tokenizer files plus `files` (name, content).
std::string ModelDir(const std::string& name,
                     const std::vector<std::pair<std::string, std::string>>& files) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("exa_chat_prompt_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(fs::path(EXA_SOURCE_DIR "/models/exa-tiny-arith") / f, dir / f);
  }
  for (const auto& [file, content] : files) std::ofstream(dir / file) << content;
  return dir.string();
}

TEST_CASE("a chat_template.jinja beside tokenizer_config.json is the model's template") {
  const std::string dir =
      ModelDir("jinja", {{"chat_template.jinja", "{{ bos_token }}J{{ messages[0].content }}\n"}});
  auto detok = engine::LoadDetokenizer(dir);
  REQUIRE(detok.ok());
  REQUIRE((*detok)->chat_template() != nullptr);
  auto out = (*detok)->chat_template()->Render(
      nlohmann::ordered_json::parse(R"({"messages": [{"role": "user", "content": "1+1"}]})"));
  REQUIRE(out.ok());
  CHECK(*out == "<s>J1+1");  // the config's bos_token, the template's trailing newline dropped
  auto config = engine::ReadTokenizerConfig(dir);
  REQUIRE(config.ok());
  CHECK(config->find("\"chat_template\":\"{{ bos_token }}J") != std::string::npos);

  const std::string bad = ModelDir("bad_jinja", {{"chat_template.jinja", "ok\n{% include 'x' %}"}});
  auto refused = engine::LoadDetokenizer(bad);
  REQUIRE(!refused.ok());
  CHECK(std::string(refused.status().message()) ==
        bad +
            "/chat_template.jinja: chat_template: line 2: {% include %} is not supported: chat "
            "templates may use if/elif/else, for, set, macro, break and continue "
            "(docs/reference/api.md#chat-templates)");
  auto plain = engine::LoadDetokenizer(EXA_SOURCE_DIR "/models/exa-tiny-arith");
  REQUIRE(plain.ok());
  CHECK((*plain)->chat_template() == nullptr);  // its tokenizer_config.json has no template
}

}  // namespace
}  // namespace exa::gateway
