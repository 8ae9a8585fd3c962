// Tool calling (docs/reference/api.md#tool-calls): a chat request's `tools` go to the model's chat
// template, and the calls the model writes in its reply come back as OpenAI's
// `message.tool_calls`. What a model writes depends on its family; the format is read from its
// chat template, under the names vLLM's --tool-call-parser gives them:
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number, after
//                optional text (Qwen 2.5 and 3, Hermes, and the templates that copy them);
//   llama3_json  the whole reply a JSON object {"name": ..., "parameters": {...}}, several
//                separated by ';' (Llama 3.1 to 3.3);
//   mistral      [TOOL_CALLS] then a JSON list of {"name": ..., "arguments": {...}} (Mistral 7B
//                v0.3, NeMo, Small), or name[ARGS]{...} after each [TOOL_CALLS] (later Mistral
//                templates); [TOOL_CALLS] is a special token, so a request with tools keeps
//                special tokens in its text (TextRequest::keep_special_tokens), and a reply that
//                is the list alone (a forced call, or a client that dropped the token) is calls
//                too. Its templates want call ids of 9 letters and digits.
// A reply that is not well-formed calls is the reply's text, as vLLM returns it.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exa::gateway {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral };

const char* ToolCallFormatName(ToolCallFormat format);

// The format a model with this chat template writes its calls in; kNone when the template
// renders no tools in a format this server parses.
ToolCallFormat DetectToolCallFormat(std::string_view chat_template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as compact text
};

struct ToolCallReply {
  std::string content;  // the text outside the calls: all of it when there are none
  std::vector<ToolCall> calls;
};

ToolCallReply ParseToolCalls(ToolCallFormat format, std::string_view text);

// While a reply streams: how many of its leading bytes may go out as content now. The rest waits
// for the end of the reply, since it is, or may begin, a call. Never decreases as `text` grows.
size_t StreamableBytes(ToolCallFormat format, std::string_view text);

// OpenAI's tool_calls: [{id, type: "function", function: {name, arguments}}], each with its
// `index` in a streamed delta. Ids are "call_" and 24 hex digits, or 9 letters and digits for
// mistral, whose templates refuse any other.
nlohmann::json ToolCallsJson(ToolCallFormat format, const std::vector<ToolCall>& calls,
                             bool streamed);

// A request's `tools` (at most kMaxTools functions, each {type: "function", function: {name,
// description?, parameters?}}): INVALID_ARGUMENT naming the entry and what is allowed.
inline constexpr size_t kMaxTools = 128;
absl::Status ValidateTools(const nlohmann::json& tools);

// A forced call (tool_choice "required" when `name` is empty, else the function `name`) as a
// structured output (engine/structured/json_schema.h): the JSON Schema of one call in `format`,
// {"name": <a tool's name>, "arguments" (hermes, mistral) or "parameters" (llama3_json): <its
// parameters>} (mistral: a list of that one call), and the text around it (hermes:
// "<tool_call>\n" ... "\n</tool_call>"). Up to 16 tools each keep
// their own parameters; with more, "required" holds the name to the list and the arguments to
// an object. `tools` is valid (ValidateTools); INVALID_ARGUMENT when `name` is not among them.
struct ForcedCall {
  std::string schema;
  std::string prefix;
  std::string suffix;
};
absl::StatusOr<ForcedCall> ForcedCallSchema(ToolCallFormat format, const nlohmann::json& tools,
                                            std::string_view name);

// The assistant messages' earlier calls as chat templates read them: `function.arguments` sent
// as JSON text (OpenAI's shape) becomes the object it holds, as vLLM and transformers pass it.
// INVALID_ARGUMENT naming messages[i].tool_calls[j] when a call is malformed.
absl::Status NormalizeToolCallMessages(nlohmann::ordered_json& messages);

// Mistral's templates refuse a call id that is not 9 characters (OpenAI's are "call_" and 24
// more): every `tool_calls[].id` and `tool_call_id` in `messages` (normalized) that is not 9
// letters and digits becomes 9 that are, the same for the same id in every request, so a call
// and its result still match and a conversation's prompt prefix stays cacheable.
void MistralToolCallIds(nlohmann::ordered_json& messages);

}  // namespace exa::gateway
