#include "tools/text_commands.h"

#include <iostream>

#include "chat_template/render_lines.h"
#include "common/file_util.h"
#include "common/strings.h"
#include "engine/tokenizer/tokenize_lines.h"
#include "tools/cli_common.h"

namespace exa::tools {
namespace {

// One JSON string per stdin line -> one JSON array of ids per line (or back with --decode).
int RunTokenize(const std::string& tokenizer_path, bool decode) {
  auto tokenizer = engine::Tokenizer::FromFile(tokenizer_path);
  if (!tokenizer.ok()) return Usage(std::string(tokenizer.status().message()));
  absl::Status s = engine::TokenizeLines(**tokenizer, std::cin, std::cout, {.decode = decode});
  if (!s.ok()) return Usage(std::string(s.message()));
  return 0;
}

// Each stdin line's conversation rendered with tokenizer_config.json's chat_template
// (docs/reference/api.md#chat-templates). A config that cannot be read, has no template or a
// template this engine refuses is a usage error.
int RunChatTemplate(const std::string& config_path, int64_t now) {
  auto text = ReadFile(config_path, 64 << 20);  // a tokenizer_config.json is a few KiB
  if (!text.ok()) return Usage(ToStd(text.status().message()), "chat-template");
  auto chat_template = chat_template::ChatTemplate::FromTokenizerConfig(*text);
  if (!chat_template.ok()) {
    return Usage(StrCat(config_path, ": ", ToStd(chat_template.status().message())),
                 "chat-template");
  }
  if (*chat_template == nullptr) {
    return Usage(StrCat(config_path, ": has no chat_template"), "chat-template");
  }
  chat_template::RenderLimits limits;
  limits.fixed_time = now;
  chat_template::RenderLines(**chat_template, std::cin, std::cout, limits);
  return 0;
}

}  // namespace

void AddTextCommands(CLI::App& app, TextCommands* c) {
  c->tokenize = app.add_subcommand(
      "tokenize", "stdin lines of JSON strings -> JSON id arrays, with a model's tokenizer.json");
  c->tokenize->add_option("--tokenizer", c->tokenizer_path, "tokenizer.json")->required();
  c->tokenize->add_flag("--decode", c->decode, "id arrays in, strings out");
  c->chat_template = app.add_subcommand(
      "chat-template",
      "stdin lines of {\"messages\", \"add_generation_prompt\", \"tools\"} -> the renderings as "
      "JSON strings, with a model's tokenizer_config.json chat_template");
  c->chat_template
      ->add_option("--tokenizer-config", c->tokenizer_config_path, "tokenizer_config.json")
      ->required();
  c->chat_template
      ->add_option("--now", c->now,
                   "render as if the clock read this many seconds since 1970 (strftime_now); "
                   "default: the clock")
      ->check(CLI::NonNegativeNumber);
}

std::optional<int> RunTextCommands(const TextCommands& c) {
  if (c.tokenize->parsed()) return RunTokenize(c.tokenizer_path, c.decode);
  if (c.chat_template->parsed()) return RunChatTemplate(c.tokenizer_config_path, c.now);
  return std::nullopt;
}

}  // namespace exa::tools
