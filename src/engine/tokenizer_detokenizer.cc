#include "engine/tokenizer_detokenizer.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

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

using OrderedJson = nlohmann::ordered_json;

// The named templates transformers saves beside the config: additional_chat_templates/NAME.jinja
// (e.g. tool_use), in name order.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> AdditionalTemplates(
    const std::string& model_dir) {
  std::vector<std::pair<std::string, std::string>> named;
  const std::filesystem::path dir = std::filesystem::path(model_dir) / "additional_chat_templates";
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) return named;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.path().extension() != ".jinja") continue;
    if (files.size() == kMaxNamedChatTemplates) {
      return absl::InvalidArgumentError(
          StrCat(dir.string(), ": more than ", kMaxNamedChatTemplates, " .jinja templates"));
    }
    files.push_back(entry.path());
  }
  if (error) return absl::InvalidArgumentError(StrCat(dir.string(), ": ", error.message()));
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    EXA_ASSIGN_OR_RETURN(std::string source, ReadFile(file.string(), kMaxTokenizerConfigBytes));
    named.emplace_back(file.stem().string(), std::move(source));
  }
  return named;
}

// `config`'s chat_template with `main` as its default (when given) and `named` added or
// replacing entries of the same name: a string when only a default is left, else the list of
// {name, template} tokenizer_config.json holds for several.
void MergeTemplates(OrderedJson& config, std::optional<std::string> main,
                    const std::vector<std::pair<std::string, std::string>>& named) {
  std::vector<std::pair<std::string, OrderedJson>> entries;
  const auto set = [&](const std::string& name, OrderedJson source) {
    for (auto& [n, s] : entries) {
      if (n == name) {
        s = std::move(source);
        return;
      }
    }
    entries.emplace_back(name, std::move(source));
  };
  if (auto it = config.find("chat_template"); it != config.end() && it->is_string()) {
    set("default", *it);
  } else if (it != config.end() && it->is_array()) {
    for (const OrderedJson& e : *it) {
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) {
        return;  // malformed: left for the template loader to name
      }
      set(e["name"].get<std::string>(), e.value("template", OrderedJson()));
    }
  }
  if (main) set("default", *std::move(main));
  for (const auto& [name, source] : named) set(name, source);
  if (entries.size() == 1 && entries[0].first == "default") {
    config["chat_template"] = std::move(entries[0].second);
    return;
  }
  OrderedJson list = OrderedJson::array();
  for (auto& [name, source] : entries) {
    list.push_back({{"name", name}, {"template", std::move(source)}});
  }
  config["chat_template"] = std::move(list);
}

}  // namespace

absl::StatusOr<std::string> ReadTokenizerConfig(const std::string& model_dir) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  const std::string template_path = model_dir + "/chat_template.jinja";
  std::string config;
  if (std::filesystem::exists(config_path)) {
    EXA_ASSIGN_OR_RETURN(config, ReadFile(config_path, kMaxTokenizerConfigBytes));
  }
  std::optional<std::string> main;
  if (std::filesystem::exists(template_path)) {
    EXA_ASSIGN_OR_RETURN(main, ReadFile(template_path, kMaxTokenizerConfigBytes));
  }
  EXA_ASSIGN_OR_RETURN(auto named, AdditionalTemplates(model_dir));
  if (!main && named.empty()) return config;
  OrderedJson parsed =
      config.empty() ? OrderedJson::object() : OrderedJson::parse(config, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError(StrCat(config_path, ": expected a JSON object"));
  }
  MergeTemplates(parsed, std::move(main), named);
  return parsed.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
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
