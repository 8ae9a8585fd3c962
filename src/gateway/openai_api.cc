#include "gateway/openai_api.h"

#include <chrono>

#include "absl/synchronization/mutex.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace exa::gateway {
namespace {

// Invalid UTF-8 from a client must not turn a JSON error body into an exception.
std::string SafeDump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

using json = nlohmann::json;

struct ApiError {
  int status;
  std::string message;
  std::string param;
};

net::HttpResponse StatusResponse(const absl::Status& s) {
  return net::JsonError(HttpStatusFor(s.code()), ToStd(s.message()), ErrorField(s));
}

// A response to an API key with rate limits carries OpenAI's x-ratelimit-* headers
// (docs/reference/api.md#rate-limits).
net::HttpResponse WithRateLimit(net::HttpResponse response, const RateLimitReport& report) {
  for (auto& header : RateLimitHeaders(report)) {
    // JsonError's Retry-After (1 s for any 429 or 503) gives way to the limiter's.
    if (header.first == "Retry-After") {
      std::erase_if(response.headers, [](const auto& h) { return h.first == "Retry-After"; });
    }
    response.headers.push_back(std::move(header));
  }
  return response;
}

// `s` for a caller whose rate-limit state is `report`: a refusal for the limit is a 429 in
// OpenAI's shape (type "requests" or "tokens", code "rate_limit_exceeded") with Retry-After
// until the request would fit.
net::HttpResponse RateLimitedStatusResponse(const absl::Status& s, const RateLimitReport& report) {
  net::HttpResponse response = StatusResponse(s);
  if (!report.refused.empty() && s.code() == absl::StatusCode::kResourceExhausted) {
    json body = {{"error",
                  {{"message", ToStd(s.message())},
                   {"type", report.refused},
                   {"param", nullptr},
                   {"code", "rate_limit_exceeded"}}}};
    response.body = SafeDump(body) + "\n";
  }
  return WithRateLimit(std::move(response), report);
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* FinishReasonText(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kStop:
      return "stop";
    case engine::FinishReason::kLength:
      return "length";
    case engine::FinishReason::kCancelled:
      return "cancelled";
    default:
      return "error";
  }
}

// Reads an optional number field, checking its type; returns an error naming the field.
std::optional<ApiError> ReadNumber(const json& body, const char* field,
                                   std::optional<double>* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return ApiError{400, StrCat(field, ": expected a number"), field};
  *out = it->get<double>();
  return std::nullopt;
}

// An integer in [lo, hi], as JSON holds it (signed or unsigned 64-bit), without wrapping.
std::optional<ApiError> CheckInteger(const json& v, std::string_view field, int64_t lo, int64_t hi,
                                     int64_t* out) {
  if (!v.is_number_integer()) {
    return ApiError{400, StrCat(field, ": expected an integer"), std::string(field)};
  }
  bool in_range;
  if (v.is_number_unsigned()) {  // nlohmann keeps every non-negative integer unsigned
    const uint64_t u = v.get<uint64_t>();
    in_range = u <= static_cast<uint64_t>(hi) && (lo <= 0 || u >= static_cast<uint64_t>(lo));
  } else {
    const int64_t x = v.get<int64_t>();
    in_range = x >= lo && x <= hi;
  }
  if (!in_range && lo == INT64_MIN && hi == INT64_MAX) {
    return ApiError{400, StrCat(field, ": ", v.dump(), " is not a 64-bit integer"),
                    std::string(field)};
  }
  if (!in_range) {
    return ApiError{400, StrCat(field, ": ", v.dump(), " is outside [", lo, ", ", hi, "]"),
                    std::string(field)};
  }
  *out = v.get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> ReadInteger(const json& body, const char* field, int64_t lo, int64_t hi,
                                    std::optional<int64_t>* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  int64_t v = 0;
  if (auto e = CheckInteger(*it, field, lo, hi, &v)) return e;
  *out = v;
  return std::nullopt;
}

// The fields /v1/completions and /v1/chat/completions share.
// OpenAI fields this server does not implement. Left at their defaults (absent, null, false, 0,
// empty) they are accepted; asked for, they are refused by name rather than silently ignored, so
// a client never takes an answer for something it did not get.
std::optional<ApiError> RefuseUnsupported(const json& body) {
  auto asked = [&](const char* field) {
    auto it = body.find(field);
    if (it == body.end() || it->is_null()) return false;
    if (it->is_boolean()) return it->get<bool>();
    if (it->is_number()) return it->get<double>() != 0;
    if (it->is_string()) return !it->get_ref<const std::string&>().empty();
    if (it->is_array() || it->is_object()) return !it->empty();
    return true;
  };
  struct Field {
    const char* name;
    const char* why;
  };
  static constexpr Field kFields[] = {
      {"logprobs",
       "not supported on the HTTP API (the gRPC API returns each token's log-probability: "
       "SamplingParams.logprobs)"},
      {"top_logprobs", "not supported"},
      {"echo", "not supported"},
      {"suffix", "not supported"},
      {"logit_bias", "not supported"},
      {"tools", "not supported: this server does not call tools"},
      {"functions", "not supported: this server does not call functions"},
  };
  for (const Field& f : kFields) {
    if (asked(f.name)) return ApiError{400, StrCat(f.name, ": ", f.why, "; omit it"), f.name};
  }
  if (auto it = body.find("best_of");
      it != body.end() && it->is_number() && it->get<double>() != 1) {
    return ApiError{400, "best_of: only 1 is supported", "best_of"};
  }
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    const bool text = it->is_object() && it->value("type", json()) == "text";
    if (!text) {
      return ApiError{400, "response_format: only {\"type\": \"text\"} is supported (no JSON mode)",
                      "response_format"};
    }
  }
  return std::nullopt;
}

// Who is asking: `cache_salt` (docs/architecture.md#prefix-cache: only requests with the same
// salt share cached prompt prefixes; its length is checked with the other fields in
// Frontend::Validate) and OpenAI's `user`, accepted for compatibility and not used.
std::optional<ApiError> ParseCacheSaltAndUser(const json& body, TextRequest* r) {
  if (auto it = body.find("user"); it != body.end() && it->is_string()) {
    r->request_id.clear();
  }
  auto it = body.find("cache_salt");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) {
    return ApiError{400, "cache_salt: expected a string (at most 256 bytes)", "cache_salt"};
  }
  r->cache_salt = it->get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> ParseCommon(const json& body, TextRequest* r, bool* stream,
                                    bool* include_usage) {
  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return ApiError{400, "model: expected a string", "model"};
    r->model = it->get<std::string>();
  }
  std::optional<int64_t> max_tokens, n, seed, top_k;
  std::optional<double> temperature, top_p, presence, frequency, repetition;
  // max_completion_tokens is OpenAI's newer name for max_tokens; errors name the one sent.
  const char* max_tokens_field =
      body.contains("max_completion_tokens") && !body.contains("max_tokens")
          ? "max_completion_tokens"
          : "max_tokens";
  // The gateway checks max_tokens against gateway.max_tokens_limit (naming the value sent); here
  // top_k is bounded by the engine's 32-bit field. A seed is any 64-bit pattern.
  std::optional<ApiError> seed_error;
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) {
      seed_error = ApiError{400, "seed: expected an integer", "seed"};
    } else {
      seed =
          it->is_number_unsigned() ? static_cast<int64_t>(it->get<uint64_t>()) : it->get<int64_t>();
    }
  }
  for (auto e : {ReadInteger(body, max_tokens_field, INT64_MIN, INT64_MAX, &max_tokens),
                 ReadInteger(body, "n", INT64_MIN, INT64_MAX, &n), seed_error,
                 ReadInteger(body, "top_k", 0, INT32_MAX, &top_k),
                 ReadNumber(body, "temperature", &temperature), ReadNumber(body, "top_p", &top_p),
                 ReadNumber(body, "presence_penalty", &presence),
                 ReadNumber(body, "frequency_penalty", &frequency),
                 ReadNumber(body, "repetition_penalty", &repetition)}) {
    if (e) return e;
  }
  if (n && *n != 1) return ApiError{400, StrCat("n: ", *n, " is not supported; only 1"), "n"};
  if (auto e = RefuseUnsupported(body)) return e;
  if ((presence && *presence != 0) || (frequency && *frequency != 0)) {
    return ApiError{400,
                    "presence_penalty and frequency_penalty are not supported; use "
                    "repetition_penalty",
                    presence && *presence != 0 ? "presence_penalty" : "frequency_penalty"};
  }
  r->max_tokens = max_tokens;
  r->max_tokens_field = max_tokens_field;
  if (seed) r->sampling.seed = static_cast<uint64_t>(*seed);
  if (top_k) r->sampling.top_k = static_cast<int32_t>(*top_k);
  // OpenAI's default temperature is 1; ours stays greedy unless asked, which is what a serving
  // daemon's health probes and tests want. Documented in the README.
  if (temperature) r->sampling.temperature = static_cast<float>(*temperature);
  if (top_p) r->sampling.top_p = static_cast<float>(*top_p);
  if (repetition) r->sampling.repetition_penalty = static_cast<float>(*repetition);
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      r->stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string())
          return ApiError{400, "stop: expected a string or list of strings", "stop"};
        r->stop.push_back(s.get<std::string>());
      }
    } else {
      return ApiError{400, "stop: expected a string or list of strings", "stop"};
    }
  }
  if (auto it = body.find("stream"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return ApiError{400, "stream: expected true or false", "stream"};
    *stream = it->get<bool>();
  }
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return ApiError{400, "stream_options: expected an object", "stream_options"};
    }
    if (auto usage = it->find("include_usage"); usage != it->end() && !usage->is_null()) {
      if (!usage->is_boolean()) {
        return ApiError{400, "stream_options.include_usage: expected true or false",
                        "stream_options.include_usage"};
      }
      *include_usage = usage->get<bool>();
    }
  }
  return ParseCacheSaltAndUser(body, r);
}

std::optional<ApiError> ParseCompletionPrompt(const json& body, TextRequest* r) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return ApiError{400, "prompt: required", "prompt"};
  if (it->is_string()) {
    r->prompt = it->get<std::string>();
  } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    r->prompt = (*it)[0].get<std::string>();
  } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
    for (size_t i = 0; i < it->size(); ++i) {
      int64_t id = 0;
      // The model's vocabulary is checked later; here only what a token id can be.
      if (auto e = CheckInteger((*it)[i], StrCat("prompt[", i, "]"), 0, INT32_MAX, &id)) {
        e->message = StrCat(e->message, " (token ids)");
        e->param = "prompt";
        return e;
      }
      r->prompt_tokens.push_back(static_cast<int32_t>(id));
    }
  } else {
    return ApiError{400, "prompt: expected a string, a list of one string, or a list of token ids",
                    "prompt"};
  }
  return std::nullopt;
}

// What a model's chat template renders (docs/reference/api.md#chat-templates): the messages as
// sent, in the order their keys were sent (tojson prints them so), a list of text parts joined into
// one string; add_generation_prompt (true unless the body says otherwise) and the
// chat_template_kwargs extension (e.g. enable_thinking), as vLLM takes them.
std::optional<ApiError> ParseChatVariables(const std::string& raw_body, TextRequest* r) {
  using ordered = nlohmann::ordered_json;
  ordered body;
  try {
    body = ordered::parse(raw_body);
  } catch (const ordered::exception& e) {  // parsed once already: not expected
    return ApiError{400, StrCat("request body: invalid JSON: ", e.what()), ""};
  }
  ordered chat = ordered::object();
  auto kwargs = body.find("chat_template_kwargs");
  if (kwargs != body.end() && !kwargs->is_null()) {
    if (!kwargs->is_object()) {
      return ApiError{400, "chat_template_kwargs: expected an object", "chat_template_kwargs"};
    }
    for (const auto& [key, value] : kwargs->items()) chat[key] = value;
  }
  auto generation = body.find("add_generation_prompt");
  if (generation != body.end() && !generation->is_null() && !generation->is_boolean()) {
    return ApiError{400, "add_generation_prompt: expected a boolean", "add_generation_prompt"};
  }
  chat["add_generation_prompt"] =
      generation == body.end() || generation->is_null() || generation->get<bool>();
  ordered messages = body["messages"];
  for (ordered& m : messages) {
    auto content = m.find("content");
    if (content == m.end() || !content->is_array()) continue;
    std::string text;
    for (const ordered& part : *content) text += part["text"].get<std::string>();
    *content = std::move(text);
  }
  chat["messages"] = std::move(messages);
  r->chat = std::move(chat);
  return std::nullopt;
}

std::optional<ApiError> ParseChatMessages(const json& body, const std::string& raw_body,
                                          TextRequest* r) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) {
    return ApiError{400, "messages: expected a non-empty list of {role, content}", "messages"};
  }
  std::string prompt;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string where = StrCat("messages[", i, "]");
    if (!m.is_object()) return ApiError{400, StrCat(where, ": expected an object"), "messages"};
    auto role_it = m.find("role");
    if (role_it == m.end() || !role_it->is_string()) {
      return ApiError{400, StrCat(where, ".role: expected a string"), "messages"};
    }
    const std::string role = role_it->get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer" &&
        role != "tool") {
      return ApiError{400,
                      StrCat(where, ".role \"", role,
                             "\": expected system, developer, user, assistant or tool"),
                      "messages"};
    }
    auto content = m.find("content");
    std::string text;
    if (content != m.end() && content->is_string()) {
      text = content->get<std::string>();
    } else if (content != m.end() && content->is_array()) {
      for (const auto& part : *content) {
        auto type = part.is_object() ? part.find("type") : part.end();
        if (!part.is_object() || type == part.end() || !type->is_string() || *type != "text") {
          return ApiError{400,
                          StrCat(where, ".content: only {\"type\": \"text\"} parts are supported"),
                          "messages"};
        }
        auto part_text = part.find("text");
        if (part_text == part.end() || !part_text->is_string()) {
          return ApiError{400, StrCat(where, ".content: a text part's text must be a string"),
                          "messages"};
        }
        text += part_text->get<std::string>();
      }
    } else if (content == m.end() || !content->is_null()) {
      return ApiError{400, StrCat(where, ".content: expected a string"), "messages"};
    }
    if (!prompt.empty() && !text.empty()) prompt += "\n";
    prompt += text;
  }
  if (prompt.empty()) {
    return ApiError{400, "messages: every message's content is empty", "messages"};
  }
  r->prompt = std::move(prompt);
  return ParseChatVariables(raw_body, r);
}

// One response in progress: collects text for a whole response or writes SSE chunks.
struct Exchange {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  std::string id;
  std::string model;
  int64_t created = 0;
  std::shared_ptr<net::HttpResponder> responder;
  std::shared_ptr<Call> call;
  RateLimitReport rate_limit;  // as of admission; set before any event
  absl::Mutex mu;
  std::string text ABSL_GUARDED_BY(mu);
  bool role_sent ABSL_GUARDED_BY(mu) = false;

  json Envelope() const {
    json out = {{"id", id},
                {"object",
                 chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
                {"created", created},
                {"model", model}};
    // The sampling seed (the request's, or the one the gateway chose): replays the request.
    if (call) out["seed"] = call->seed();
    return out;
  }
  static json Usage(const engine::StreamEvent& e) {
    return {{"prompt_tokens", e.prompt_tokens},
            {"completion_tokens", e.completion_tokens},
            {"total_tokens", e.prompt_tokens + e.completion_tokens}};
  }
  void Send(const json& chunk) {
    if (!responder->Write("data: " + SafeDump(chunk) + "\n\n") && call) call->Cancel();
  }

  void OnEvent(const engine::StreamEvent& e) {
    if (stream) {
      OnStreamEvent(e);
      return;
    }
    absl::MutexLock lock(&mu);
    text += e.text;
    if (!e.finished) return;
    if (!e.status.ok()) {
      // Cancelled by the server (drain deadline, engine stop) or failed: an error, not a
      // truncated 200. (When the client itself went away nobody reads this.)
      int status = e.finish_reason == engine::FinishReason::kCancelled ? 503 : 500;
      responder->Respond(
          WithRateLimit(net::JsonError(status, ToStd(e.status.message())), rate_limit));
      return;
    }
    json out = Envelope();
    json choice = {{"index", 0}, {"finish_reason", FinishReasonText(e.finish_reason)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
      choice["text"] = text;
      choice["logprobs"] = nullptr;
    }
    out["choices"] = json::array({choice});
    out["usage"] = Usage(e);
    responder->Respond(
        WithRateLimit({200, "application/json", SafeDump(out) + "\n", {}}, rate_limit));
  }

  void OnStreamEvent(const engine::StreamEvent& e) {
    absl::MutexLock lock(&mu);
    if (!e.text.empty() || (chat && !role_sent)) {
      json chunk = Envelope();
      json choice = {{"index", 0}, {"finish_reason", nullptr}};
      if (chat) {
        choice["delta"] = {{"content", e.text}};
        if (!role_sent) choice["delta"]["role"] = "assistant";
        role_sent = true;
      } else {
        choice["text"] = e.text;
      }
      chunk["choices"] = json::array({choice});
      Send(chunk);
    }
    if (!e.finished) return;
    if (!e.status.ok()) {
      // After streaming began, the client gets an explicit error, never a silent truncation.
      Send({{"error", {{"message", ToStd(e.status.message())}, {"type", "server_error"}}}});
    } else {
      json chunk = Envelope();
      json choice = {{"index", 0}, {"finish_reason", FinishReasonText(e.finish_reason)}};
      if (chat) {
        choice["delta"] = json::object();
      } else {
        choice["text"] = "";
      }
      chunk["choices"] = json::array({choice});
      Send(chunk);
      if (include_usage) {
        json usage = Envelope();
        usage["choices"] = json::array();
        usage["usage"] = Usage(e);
        Send(usage);
      }
    }
    responder->Write("data: [DONE]\n\n");
    responder->Finish();
  }
};

void HandleGenerate(Frontend& frontend, bool chat, net::HttpRequest req,
                    std::shared_ptr<net::HttpResponder> responder) {
  absl::StatusOr<std::string> tenant = frontend.Authorize(req.Header("authorization"));
  if (!tenant.ok()) {
    responder->Respond(StatusResponse(tenant.status()));
    return;
  }
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    responder->Respond(net::JsonError(400, StrCat("request body: invalid JSON: ", e.what())));
    return;
  }
  if (!body.is_object()) {
    responder->Respond(net::JsonError(400, "request body: expected a JSON object"));
    return;
  }
  TextRequest request;
  request.tenant = *std::move(tenant);
  auto exchange = std::make_shared<Exchange>();
  exchange->chat = chat;
  exchange->responder = responder;
  std::optional<ApiError> error =
      ParseCommon(body, &request, &exchange->stream, &exchange->include_usage);
  if (!error)
    error =
        chat ? ParseChatMessages(body, req.body, &request) : ParseCompletionPrompt(body, &request);
  if (error) {
    responder->Respond(WithRateLimit(net::JsonError(error->status, error->message, error->param),
                                     frontend.RateLimitState(request.tenant)));
    return;
  }
  for (const std::string& name : frontend.RouteHeaders()) {
    if (auto value = req.Header(name); !value.empty()) request.headers[name] = std::string(value);
  }
  // A caller's trace id (as proxies set it) becomes the request id every node logs.
  request.request_id = std::string(req.Header("x-request-id"));
  exchange->created = UnixNow();
  // Events can arrive on the engine thread as soon as Start submits; holding the exchange's
  // lock until its id and call are set makes them wait for that.
  absl::StatusOr<std::shared_ptr<Call>> call;
  {
    absl::MutexLock lock(&exchange->mu);
    call = frontend.Start(
        std::move(request), [exchange](const engine::StreamEvent& e) { exchange->OnEvent(e); },
        &exchange->rate_limit);
    if (call.ok()) {
      exchange->call = *call;
      exchange->id = StrCat(chat ? "chatcmpl-" : "cmpl-", (*call)->request_id());
      exchange->model = (*call)->model();
      if (exchange->stream) {
        responder->StartStream(200, "text/event-stream", RateLimitHeaders(exchange->rate_limit));
      }
    }
  }
  if (!call.ok()) {
    responder->Respond(RateLimitedStatusResponse(call.status(), exchange->rate_limit));
    return;
  }
  responder->OnClientGone([call = *call] { call->Cancel(); });
}

}  // namespace

void AddOpenAiRoutes(net::HttpServer& server, Frontend& frontend) {
  server.AddRoute(
      "POST", "/v1/completions",
      net::HttpHandler([&frontend](net::HttpRequest req, std::shared_ptr<net::HttpResponder> r) {
        HandleGenerate(frontend, /*chat=*/false, std::move(req), std::move(r));
      }));
  server.AddRoute(
      "POST", "/v1/chat/completions",
      net::HttpHandler([&frontend](net::HttpRequest req, std::shared_ptr<net::HttpResponder> r) {
        HandleGenerate(frontend, /*chat=*/true, std::move(req), std::move(r));
      }));
  server.AddRoute("GET", "/v1/models", [&frontend](const net::HttpRequest& req) {
    if (auto tenant = frontend.Authorize(req.Header("authorization")); !tenant.ok()) {
      return StatusResponse(tenant.status());
    }
    json data = json::array();
    for (const ModelView& m : frontend.Models()) {
      data.push_back({{"id", m.name},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "exaserve"},
                      {"version", m.version},
                      {"max_context", m.max_context}});
    }
    return net::HttpResponse{
        200, "application/json", SafeDump(json({{"object", "list"}, {"data", data}})) + "\n", {}};
  });
}

}  // namespace exa::gateway
