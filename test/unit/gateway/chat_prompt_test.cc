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
  for (const auto& [file, content] : files) {
    fs::create_directories((dir / file).parent_path());
    std::ofstream(dir / file) << content;
  }
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

TEST_CASE("additional_chat_templates/tool_use.jinja renders the requests with tools") {
  const std::string dir =
      ModelDir("named", {{"chat_template.jinja", "D{{ messages[0].content }}"},
                         {"additional_chat_templates/tool_use.jinja",
                          "T{{ tools | length }}{{ messages[0].content }}"},
                         {"additional_chat_templates/notes.txt", "not a template"}});
  auto detok = engine::LoadDetokenizer(dir);
  REQUIRE(detok.ok());
  const chat_template::ChatTemplate& t = *(*detok)->chat_template();
  auto plain = t.Render(
      nlohmann::ordered_json::parse(R"({"messages": [{"role": "user", "content": "1+1"}]})"));
  REQUIRE(plain.ok());
  CHECK(*plain == "D1+1");
  auto with_tools = t.Render(nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "user", "content": "1+1"}], "tools": [{"type": "function"}]})"));
  REQUIRE(with_tools.ok());
  CHECK(*with_tools == "T11+1");
  CHECK(t.source(/*tools=*/true) == "T{{ tools | length }}{{ messages[0].content }}");
  // The same config as a gateway receives it: a list of {name, template}.
  auto config = engine::ReadTokenizerConfig(dir);
  REQUIRE(config.ok());
  const auto parsed = nlohmann::json::parse(*config);
  REQUIRE(parsed["chat_template"].is_array());
  CHECK(parsed["chat_template"][0]["name"] == "default");
  CHECK(parsed["chat_template"][1]["name"] == "tool_use");

  // Beside a config's own list, a file replaces the entry of its name and keeps the others.
  const std::string listed = ModelDir("listed", {{"additional_chat_templates/rag.jinja", "R"}});
  {
    std::ofstream(std::filesystem::path(listed) / "tokenizer_config.json")
        << R"({"chat_template": [{"name": "default", "template": "D"},
                                 {"name": "rag", "template": "old"}]})";
  }
  auto merged = engine::ReadTokenizerConfig(listed);
  REQUIRE(merged.ok());
  CHECK(nlohmann::json::parse(*merged)["chat_template"] ==
        nlohmann::json::parse(R"([{"name": "default", "template": "D"},
                                   {"name": "rag", "template": "R"}])"));
}

}  // namespace
}  // namespace exa::gateway
