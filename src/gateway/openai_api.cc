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

net::HttpResponse ErrorResponse(int status, std::string_view message, std::string_view param = "") {
  std::string type = status == 401   ? "authentication_error"
                     : status == 429 ? "rate_limit_error"
                     : status == 404 ? "not_found_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  json body = {{"error",
                {{"message", message},
                 {"type", type},
                 {"param", param.empty() ? json(nullptr) : json(param)},
                 {"code", status}}}};
  net::HttpResponse r{status, "application/json", SafeDump(body) + "\n", {}};
  if (status == 429 || status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

net::HttpResponse StatusResponse(const absl::Status& s) {
  return ErrorResponse(HttpStatusFor(s.code()), ToStd(s.message()));
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
template <typename T>
std::optional<ApiError> ReadNumber(const json& body, const char* field, std::optional<T>* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return ApiError{400, StrCat(field, ": expected a number"), field};
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer())
      return ApiError{400, StrCat(field, ": expected an integer"), field};
  }
  *out = it->get<T>();
  return std::nullopt;
}

// The fields /v1/completions and /v1/chat/completions share.
std::optional<ApiError> ParseCommon(const json& body, TextRequest* r, bool* stream,
                                    bool* include_usage) {
  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return ApiError{400, "model: expected a string", "model"};
    r->model = it->get<std::string>();
  }
  std::optional<int64_t> max_tokens, n, seed, top_k;
  std::optional<double> temperature, top_p, presence, frequency, repetition;
  for (auto e : {ReadNumber(body, "max_tokens", &max_tokens),
                 ReadNumber(body, "max_completion_tokens", &max_tokens), ReadNumber(body, "n", &n),
                 ReadNumber(body, "seed", &seed), ReadNumber(body, "top_k", &top_k),
                 ReadNumber(body, "temperature", &temperature), ReadNumber(body, "top_p", &top_p),
                 ReadNumber(body, "presence_penalty", &presence),
                 ReadNumber(body, "frequency_penalty", &frequency),
                 ReadNumber(body, "repetition_penalty", &repetition)}) {
    if (e) return e;
  }
  if (n && *n != 1) return ApiError{400, StrCat("n: ", *n, " is not supported; only 1"), "n"};
  if ((presence && *presence != 0) || (frequency && *frequency != 0)) {
    return ApiError{400,
                    "presence_penalty and frequency_penalty are not supported; use "
                    "repetition_penalty",
                    presence && *presence != 0 ? "presence_penalty" : "frequency_penalty"};
  }
  if (max_tokens) {
    if (*max_tokens < 1 || *max_tokens > INT32_MAX) {
      return ApiError{400, StrCat("max_tokens: ", *max_tokens, " must be at least 1"),
                      "max_tokens"};
    }
    r->max_tokens = static_cast<int32_t>(*max_tokens);
  }
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
  if (auto it = body.find("stream_options"); it != body.end() && it->is_object()) {
    *include_usage = it->value("include_usage", false);
  }
  if (auto it = body.find("user"); it != body.end() && it->is_string()) {
    r->request_id.clear();  // accepted for compatibility; not used for routing
  }
  return std::nullopt;
}

std::optional<ApiError> ParseCompletionPrompt(const json& body, TextRequest* r) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return ApiError{400, "prompt: required", "prompt"};
  if (it->is_string()) {
    r->prompt = it->get<std::string>();
  } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    r->prompt = (*it)[0].get<std::string>();
  } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
    for (const auto& t : *it) {
      if (!t.is_number_integer())
        return ApiError{400, "prompt: token ids must be integers", "prompt"};
      r->prompt_tokens.push_back(t.get<int32_t>());
    }
  } else {
    return ApiError{400, "prompt: expected a string, a list of one string, or a list of token ids",
                    "prompt"};
  }
  return std::nullopt;
}

std::optional<ApiError> ParseChatMessages(const json& body, TextRequest* r) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) {
    return ApiError{400, "messages: expected a non-empty list of {role, content}", "messages"};
  }
  std::string prompt;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string where = StrCat("messages[", i, "]");
    if (!m.is_object()) return ApiError{400, StrCat(where, ": expected an object"), "messages"};
    std::string role = m.value("role", "");
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
        if (!part.is_object() || part.value("type", "") != "text") {
          return ApiError{400, StrCat(where, ".content: only text parts are supported"),
                          "messages"};
        }
        text += part.value("text", "");
      }
    } else if (content == m.end() || !content->is_null()) {
      return ApiError{400, StrCat(where, ".content: expected a string"), "messages"};
    }
    if (!prompt.empty() && !text.empty()) prompt += "\n";
    prompt += text;
  }
  r->prompt = std::move(prompt);
  return std::nullopt;
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
  absl::Mutex mu;
  std::string text ABSL_GUARDED_BY(mu);
  bool role_sent ABSL_GUARDED_BY(mu) = false;

  json Envelope() const {
    return {{"id", id},
            {"object",
             chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
            {"created", created},
            {"model", model}};
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
      responder->Respond(ErrorResponse(status, ToStd(e.status.message())));
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
    responder->Respond({200, "application/json", SafeDump(out) + "\n", {}});
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
  if (absl::Status auth = frontend.Authorize(req.Header("authorization")); !auth.ok()) {
    responder->Respond(StatusResponse(auth));
    return;
  }
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::parse_error& e) {
    responder->Respond(ErrorResponse(400, StrCat("request body: invalid JSON: ", e.what())));
    return;
  }
  if (!body.is_object()) {
    responder->Respond(ErrorResponse(400, "request body: expected a JSON object"));
    return;
  }
  TextRequest request;
  auto exchange = std::make_shared<Exchange>();
  exchange->chat = chat;
  exchange->responder = responder;
  std::optional<ApiError> error =
      ParseCommon(body, &request, &exchange->stream, &exchange->include_usage);
  if (!error)
    error = chat ? ParseChatMessages(body, &request) : ParseCompletionPrompt(body, &request);
  if (error) {
    responder->Respond(ErrorResponse(error->status, error->message, error->param));
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
    call = frontend.Start(std::move(request),
                          [exchange](const engine::StreamEvent& e) { exchange->OnEvent(e); });
    if (call.ok()) {
      exchange->call = *call;
      exchange->id = StrCat(chat ? "chatcmpl-" : "cmpl-", (*call)->request_id());
      exchange->model = (*call)->model();
      if (exchange->stream) responder->StartStream(200, "text/event-stream");
    }
  }
  if (!call.ok()) {
    responder->Respond(StatusResponse(call.status()));
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
    if (absl::Status auth = frontend.Authorize(req.Header("authorization")); !auth.ok()) {
      return StatusResponse(auth);
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
