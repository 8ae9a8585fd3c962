#include "gateway/chat_prompt.h"

#include <string>
#include <utility>

#include "common/strings.h"
#include "gateway/tool_calls.h"

namespace exa::gateway {

absl::StatusOr<std::vector<int32_t>> PromptTokens(TextRequest& r, const ModelView& model,
                                                  size_t max_prompt_bytes) {
  if (!r.prompt_tokens.empty()) return std::move(r.prompt_tokens);
  const engine::Tokenizer& tokenizer = model.tokenizer->tokenizer();
  const chat_template::ChatTemplate* chat_template = model.tokenizer->chat_template();
  const ToolCallFormat format = chat_template == nullptr
                                    ? ToolCallFormat::kNone
                                    : DetectToolCallFormat(chat_template->source(r.tools));
  if (r.tools && format == ToolCallFormat::kNone) {
    return FieldError("tools",
                      "the model's chat template does not write tool calls in a format this "
                      "server parses (hermes <tool_call>, Llama 3 JSON or Mistral [TOOL_CALLS])");
  }
  if (format == ToolCallFormat::kMistral && r.chat) {
    MistralToolCallIds((*r.chat)["messages"]);
    // The calls begin with a special token, which the reply's text must keep to be read.
    if (r.tools) r.keep_special_tokens = true;
  }
  if (r.tools && r.forced_tool && r.chat) {
    // The call is held to the tool's parameters, in the model's own format.
    const nlohmann::json tools = nlohmann::json::parse(r.chat->value("tools", "[]"_json).dump());
    absl::StatusOr<ForcedCall> forced = ForcedCallSchema(format, tools, *r.forced_tool);
    if (!forced.ok()) return FieldError("tool_choice", ToStd(forced.status().message()));
    r.json_schema = std::move(forced->schema);
    r.json_prefix = std::move(forced->prefix);
    r.json_suffix = std::move(forced->suffix);
    r.json_schema_field = "tool_choice";
  }
  if (!r.chat || chat_template == nullptr) return tokenizer.Encode(r.prompt, true);
  chat_template::RenderLimits limits;
  // Framing on top of a prompt already bounded by max_prompt_bytes: the slack only keeps a
  // runaway template from building strings without bound; the rendering is checked below.
  limits.max_output_bytes = max_prompt_bytes + (1 << 20);
  absl::StatusOr<std::string> rendered = chat_template->Render(*r.chat, limits);
  if (!rendered.ok()) {
    return FieldError("messages",
                      StrCat("the model's chat template: ", ToStd(rendered.status().message())));
  }
  if (rendered->size() > max_prompt_bytes) {
    return FieldError("messages", StrCat("the chat template renders ", rendered->size(),
                                         " bytes, larger than gateway.max_prompt_bytes (",
                                         max_prompt_bytes, ")"));
  }
  return tokenizer.Encode(*rendered, /*add_special_tokens=*/false);
}

}  // namespace exa::gateway
