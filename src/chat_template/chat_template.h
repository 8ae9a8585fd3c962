// Chat templates: the Jinja subset that Hugging Face models ship in tokenizer_config.json's
// `chat_template` to turn a conversation into the prompt the model was trained on
// (docs/reference/api.md#chat-templates). Semantics are @huggingface/jinja's (transformers.js),
// which a conformance test holds this engine to byte for byte on real templates.
//
// A template is parsed once, when its model loads: anything this engine cannot render (an
// unsupported statement, filter, test, method or function) fails the parse with its line and
// name, never a request. A render is bounded (RenderLimits) and fails with a clear error past a
// bound, or with the template's own raise_exception message.
//
// Thread safety: a parsed Template / ChatTemplate is immutable; any number of threads may render
// it at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "chat_template/ast.h"
#include "chat_template/value.h"
#include "nlohmann/json.hpp"

namespace exa::chat_template {

// A render's bounds, and the clock its templates read.
struct RenderLimits {
  // Every string a render builds, the output included. A conversation is bounded by the
  // gateway's max_prompt_bytes (256 KiB by default); a template adds a few KiB of framing.
  size_t max_output_bytes = 4 << 20;
  // Loop iterations summed over the whole render: a template loops over messages and tools a
  // few times, so real renders stay far below this.
  int64_t max_loop_iterations = 1000000;
  // Macro calls nested in macro calls (a recursive macro stops here, not on the stack).
  int max_call_depth = 64;
  // The clock strftime_now reads, in Unix seconds; negative: the system's. Set only to make a
  // rendering reproducible (exaserve-cli chat-template --now).
  int64_t fixed_time = -1;
};

class Template {
 public:
  // INVALID_ARGUMENT "line N: ..." naming what is wrong or unsupported.
  static absl::StatusOr<std::unique_ptr<const Template>> Parse(std::string_view source);
  // Renders with `variables` as the template's globals. INVALID_ARGUMENT "line N: ..." for an
  // error the template hits (its raise_exception included); RESOURCE_EXHAUSTED past a limit.
  absl::StatusOr<std::string> Render(const Entries& variables,
                                     const RenderLimits& limits = {}) const;

 private:
  std::vector<Stmt> program_;
};

// A model's chat template with the special tokens tokenizer_config.json gives it.
class ChatTemplate {
 public:
  // nullptr when the config has no chat_template; INVALID_ARGUMENT naming the field or the
  // template's line when the config or the template is bad. Of a list of named templates
  // (Command R's, Aya's), "default" renders requests without tools and "tool_use", when there is
  // one, requests with tools, as transformers chooses.
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> FromTokenizerConfig(
      std::string_view config_json);

  // Renders `request`: {"messages": [...], "tools": [...], "add_generation_prompt": bool, and
  // any extra template variable such as enable_thinking}. Absent tools are none and absent
  // add_generation_prompt is false, as transformers passes them; bos_token and eos_token come
  // from the config. Tools other than null select the "tool_use" template where there is one.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& request,
                                     const RenderLimits& limits = {}) const;

  const Value& bos_token() const { return bos_token_; }
  const Value& eos_token() const { return eos_token_; }
  // The text of the template that renders requests with tools or without, for what a caller
  // reads from it (gateway/tool_calls.h: the format the model writes tool calls in).
  const std::string& source(bool tools = false) const;

 private:
  static bool HasTools(const Value& request);
  const Template& For(bool tools) const;

  std::unique_ptr<const Template> template_;
  std::string source_;
  std::unique_ptr<const Template> tool_template_;  // "tool_use" of a named list; may be null
  std::string tool_source_;
  Value bos_token_ = Value::Null();
  Value eos_token_ = Value::Null();
};

}  // namespace exa::chat_template
