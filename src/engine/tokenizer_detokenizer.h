// Adapts the Hugging Face tokenizer (engine/tokenizer/) to the engine's Detokenizer interface,
// so stop strings and streamed text use the model's own tokenizer.json. Like a Hugging Face
// tokenizer it also carries the model's chat template (tokenizer_config.json's chat_template,
// docs/reference/api.md#chat-templates), when the model has one.
//
// Thread safety: the Detokenizer is immutable and shared; each stream belongs to one sequence.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "chat_template/chat_template.h"
#include "engine/detokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace exa::engine {

class TokenizerDetokenizer final : public Detokenizer {
 public:
  explicit TokenizerDetokenizer(
      std::shared_ptr<const Tokenizer> tokenizer,
      std::shared_ptr<const chat_template::ChatTemplate> chat_template = nullptr)
      : tokenizer_(std::move(tokenizer)), chat_template_(std::move(chat_template)) {}
  std::unique_ptr<TextStream> NewStream(bool keep_special_tokens = false) const override;
  // Built once, on the first structured request (a walk over the whole vocabulary).
  std::shared_ptr<const structured::TokenTrie> token_trie() const override;
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // nullptr when the model has no chat template (chat prompts then join the messages).
  const chat_template::ChatTemplate* chat_template() const { return chat_template_.get(); }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const chat_template::ChatTemplate> chat_template_;
  mutable absl::once_flag trie_once_;
  mutable std::shared_ptr<const structured::TokenTrie> trie_;  // set once under trie_once_
};

// Loads `<model_dir>/tokenizer.json` and, when there is one, the model's chat template
// (ReadTokenizerConfig): a template this engine cannot render fails the load, naming the file and
// line.
absl::StatusOr<std::shared_ptr<const TokenizerDetokenizer>> LoadDetokenizer(
    const std::string& model_dir);

// The same from the two files' contents (a gateway learns them from the node serving the
// model); an empty `tokenizer_config_json` means the model has none. `source` names the model in
// errors.
absl::StatusOr<std::shared_ptr<const TokenizerDetokenizer>> DetokenizerFromJson(
    std::string_view tokenizer_json, std::string_view tokenizer_config_json,
    std::string_view source);

// `<model_dir>/tokenizer_config.json` as a gateway needs it, "" when the model has none. The
// templates newer transformers save beside it take part as they do for transformers:
// `chat_template.jinja` replaces its default chat_template, and each
// `additional_chat_templates/NAME.jinja` (at most kMaxNamedChatTemplates) is the template named
// NAME (`tool_use` renders requests with tools).
absl::StatusOr<std::string> ReadTokenizerConfig(const std::string& model_dir);
inline constexpr size_t kMaxNamedChatTemplates = 16;

// At most this many bytes of tokenizer_config.json are read (real ones are a few KiB, a few
// hundred with a large added_tokens_decoder).
inline constexpr size_t kMaxTokenizerConfigBytes = 16 << 20;

}  // namespace exa::engine
