// The body of an OpenAI request (docs/reference/api.md#the-openai-compatible-http-api) parsed
// into what the Frontend runs: the fields /v1/completions and /v1/chat/completions share, the
// prompts (a /v1/completions batch holds several), `n`, streaming and log-probabilities. Pure:
// no I/O, no clock; every refusal is an ApiError naming the field and what is allowed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/frontend.h"
#include "nlohmann/json.hpp"

namespace exa::gateway {

// Bounds on one request's fan-out (docs/reference/api.md#choices-and-batches): each choice is a
// request in flight of its own, so a request may not open more than these.
inline constexpr int kMaxN = 16;            // choices per prompt (`n`)
inline constexpr int kMaxPrompts = 32;      // prompts in one /v1/completions request
inline constexpr int kMaxChoices = 64;      // prompts × n
inline constexpr int kMaxTopLogprobs = 20;  // the engine's bound (engine/sampler.h)

// An OpenAI error: the HTTP status, the message, the field at fault (`param`) and OpenAI's
// string `code`, each "" when there is none (null in the JSON).
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;
  std::string code;
};

// How a response reports log-probabilities: not at all, the chat shape
// (choices[].logprobs.content[]) or the legacy completions shape (tokens, token_logprobs, ...).
enum class LogprobsShape { kNone, kChat, kLegacy };

struct OpenAiRequest {
  bool chat = false;
  std::string model;  // as sent (read first, so a refusal can still be counted under it)
  // One per prompt, each with the fields every choice shares (a chat request has one).
  std::vector<TextRequest> prompts;
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  LogprobsShape logprobs = LogprobsShape::kNone;
  int top_logprobs = 0;  // alternatives per position (also in each prompt's sampling)
  bool seeded = false;   // the caller gave a seed
  // Tool calling (docs/reference/api.md#tool-calls): the reply's calls are parsed (each prompt's
  // TextRequest::tools says the same); all of them, or only the first.
  bool tools = false;
  bool parallel_tool_calls = true;
};

// Parses the body of /v1/chat/completions (`chat`) or /v1/completions.
std::optional<ApiError> ParseOpenAiRequest(const std::string& body, bool chat, OpenAiRequest* out);

// The requests to start, in OpenAI's choice order (prompt i's samples are choices i*n to
// i*n+n-1); sample j of each prompt draws with `seed` + j, so n samples differ and the whole
// request replays from one seed.
std::vector<TextRequest> ChoiceRequests(const OpenAiRequest& request, uint64_t seed);

// A chat request's messages (docs/reference/api.md#chat-templates) into `r`: the prompt joined
// for a model without a chat template, and what a template renders. /tokenize reads them too.
std::optional<ApiError> ParseChatMessages(const nlohmann::json& body, const std::string& raw_body,
                                          TextRequest* r);

// `j` as JSON text; invalid UTF-8 from a client is replaced rather than thrown about.
std::string SafeDump(const nlohmann::json& j);

}  // namespace exa::gateway
