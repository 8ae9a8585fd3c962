// `exaserve-cli tokenize` and `exaserve-cli chat-template`: a model's tokenizer files applied to
// stdin lines, with no cluster involved (the conformance tests drive both: test/unit/
// engine_tokenizer and test/integration/chat_template_test.sh).
//
// Exit codes: 0 every line was read, 2 usage (a missing or bad file or flag, a line tokenize
// cannot read). chat-template prints {"error": MESSAGE} for a line whose render fails and goes on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"

namespace exa::tools {

struct TextCommands {
  std::string tokenizer_path;
  bool decode = false;
  std::string tokenizer_config_path;
  int64_t now = -1;  // chat-template --now: strftime_now's clock, Unix seconds
  CLI::App* tokenize = nullptr;
  CLI::App* chat_template = nullptr;
};

void AddTextCommands(CLI::App& app, TextCommands* commands);
// The exit code when one of these commands was given; nullopt otherwise.
std::optional<int> RunTextCommands(const TextCommands& commands);

}  // namespace exa::tools
