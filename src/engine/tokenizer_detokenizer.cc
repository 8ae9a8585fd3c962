#include "engine/tokenizer_detokenizer.h"

#include <filesystem>

#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/structured/token_trie.h"
#include "engine/tokenizer/stream_decoder.h"

namespace exa::engine {
namespace {

class Stream final : public TextStream {
 public:
  Stream(const Tokenizer& tokenizer, bool keep_special_tokens)
      : decoder_(tokenizer, /*skip_special_tokens=*/!keep_special_tokens) {}
  std::string Push(int32_t token) override { return decoder_.Push(token); }
  std::string Flush() override { return decoder_.Flush(); }

 private:
  StreamDecoder decoder_;
};

}  // namespace

std::unique_ptr<TextStream> TokenizerDetokenizer::NewStream(bool keep_special_tokens) const {
  return std::make_unique<Stream>(*tokenizer_, keep_special_tokens);
}

std::shared_ptr<const structured::TokenTrie> TokenizerDetokenizer::token_trie() const {
  absl::call_once(trie_once_, [this] {
    trie_ = std::make_shared<const structured::TokenTrie>(tokenizer_->AllTokenBytes());
  });
  return trie_;
}

namespace {

absl::StatusOr<std::shared_ptr<const chat_template::ChatTemplate>> ParseChatTemplate(
    std::string_view tokenizer_config_json, std::string_view source) {
  if (tokenizer_config_json.empty()) return nullptr;
  auto parsed = chat_template::ChatTemplate::FromTokenizerConfig(tokenizer_config_json);
  if (!parsed.ok()) return Annotate(parsed.status(), source);
  return *std::move(parsed);
}

}  // namespace

absl::StatusOr<std::string> ReadTokenizerConfig(const std::string& model_dir) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  const std::string template_path = model_dir + "/chat_template.jinja";
  std::string config;
  if (std::filesystem::exists(config_path)) {
    EXA_ASSIGN_OR_RETURN(config, ReadFile(config_path, kMaxTokenizerConfigBytes));
  }
  if (!std::filesystem::exists(template_path)) return config;
  EXA_ASSIGN_OR_RETURN(std::string source, ReadFile(template_path, kMaxTokenizerConfigBytes));
  using json = nlohmann::ordered_json;
  json parsed = config.empty() ? json::object() : json::parse(config, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError(StrCat(config_path, ": expected a JSON object"));
  }
  parsed["chat_template"] = std::move(source);
  return parsed.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<std::shared_ptr<const TokenizerDetokenizer>> LoadDetokenizer(
    const std::string& model_dir) {
  EXA_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                       Tokenizer::FromFile(model_dir + "/tokenizer.json"));
  EXA_ASSIGN_OR_RETURN(std::string config, ReadTokenizerConfig(model_dir));
  const bool jinja = std::filesystem::exists(model_dir + "/chat_template.jinja");
  EXA_ASSIGN_OR_RETURN(auto chat_template,
                       ParseChatTemplate(config, model_dir + (jinja ? "/chat_template.jinja"
                                                                    : "/tokenizer_config.json")));
  return std::make_shared<const TokenizerDetokenizer>(std::move(tokenizer),
                                                      std::move(chat_template));
}

absl::StatusOr<std::shared_ptr<const TokenizerDetokenizer>> DetokenizerFromJson(
    std::string_view tokenizer_json, std::string_view tokenizer_config_json,
    std::string_view source) {
  EXA_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                       Tokenizer::FromJson(tokenizer_json, std::string(source)));
  EXA_ASSIGN_OR_RETURN(
      auto chat_template,
      ParseChatTemplate(tokenizer_config_json, StrCat(source, ": tokenizer_config.json")));
  return std::make_shared<const TokenizerDetokenizer>(std::move(tokenizer),
                                                      std::move(chat_template));
}

}  // namespace exa::engine
