#include "gateway/openai_api.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <random>

#include "absl/synchronization/mutex.h"
#include "common/strings.h"
#include "gateway/openai_logprobs.h"
#include "gateway/openai_request.h"
#include "gateway/openai_routes.h"
#include "gateway/tool_calls.h"
#include "nlohmann/json.hpp"

namespace exa::gateway {

using json = nlohmann::json;

ApiResponder::ApiResponder(std::shared_ptr<net::HttpResponder> inner, Frontend& frontend,
                           std::string endpoint, const net::HttpRequest& request)
    : inner_(std::move(inner)),
      frontend_(frontend),
      endpoint_(std::move(endpoint)),
      sent_request_id_(request.Header("x-request-id")),
      request_id_(!sent_request_id_.empty() && ValidRequestId(sent_request_id_) ? sent_request_id_
                                                                                : NewRequestId()) {}

void ApiResponder::SetModel(std::string label) {
  absl::MutexLock lock(&mu_);
  model_ = std::move(label);
}

void ApiResponder::Count(int status) {
  std::string model;
  {
    absl::MutexLock lock(&mu_);
    if (counted_) return;
    counted_ = true;
    model = model_;
  }
  frontend_.CountResponse(endpoint_, model, status);
}

void ApiResponder::Respond(net::HttpResponse response) {
  Count(response.status);
  response.headers.emplace_back("x-request-id", request_id_);
  inner_->Respond(std::move(response));
}

void ApiResponder::StartStream(int status, std::string content_type,
                               std::vector<std::pair<std::string, std::string>> headers) {
  Count(status);
  headers.emplace_back("x-request-id", request_id_);
  inner_->StartStream(status, std::move(content_type), std::move(headers));
}

net::HttpResponse ErrorResponse(const ApiError& e) {
  return net::JsonError(e.status, e.message, e.param, e.code);
}

net::HttpResponse StatusResponse(const absl::Status& s) {
  std::string code = ErrorCode(s);
  if (code.empty() && s.code() == absl::StatusCode::kUnauthenticated) code = "invalid_api_key";
  return net::JsonError(HttpStatusFor(s.code()), ToStd(s.message()), ErrorField(s), code);
}

namespace {

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

uint64_t NewSeed() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
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

// One choice of a response in progress.
struct ChoiceState {
  std::shared_ptr<Call> call;
  std::string text;                    // a whole response's text so far
  std::vector<TokenLogprob> logprobs;  // whole response: all; stream: those not sent yet
  int64_t text_offset = 0;             // legacy logprobs: characters of the tokens sent
  size_t sent = 0;                     // a stream with tools: bytes of `text` sent as content
  bool role_sent = false;
  engine::FinishReason finish_reason = engine::FinishReason::kNone;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
};

// One response in progress, of one or more choices (docs/reference/api.md#choices-and-batches):
// collects them for a whole response, or writes each choice's SSE chunks as its tokens come.
struct Exchange {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  int n = 1;
  LogprobsShape logprobs = LogprobsShape::kNone;
  // Tool calling (gateway/tool_calls.h): the format the model's replies are parsed in, kNone
  // when the request asked for no tools.
  bool tools = false;
  bool parallel_tool_calls = true;
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  std::string id;
  std::string model;
  int64_t created = 0;
  uint64_t seed = 0;
  std::shared_ptr<ApiResponder> responder;
  std::shared_ptr<const engine::TokenizerDetokenizer> tokenizer;
  RateLimitReport rate_limit;  // as of admission; set before any event
  absl::Mutex mu;
  std::vector<ChoiceState> choices ABSL_GUARDED_BY(mu);
  size_t open ABSL_GUARDED_BY(mu) = 0;     // choices not finished
  bool ended ABSL_GUARDED_BY(mu) = false;  // answered, refused, or the stream closed

  json Envelope() const {
    json out = {{"id", id},
                {"object",
                 chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
                {"created", created},
                {"model", model}};
    // The sampling seed (the request's, or the one the gateway chose): replays the request.
    out["seed"] = seed;
    return out;
  }

  // Usage summed over the choices: each prompt's tokens once, every choice's completion.
  json Usage() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    int64_t prompt = 0, completion = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
      if (i % static_cast<size_t>(n) == 0) prompt += choices[i].prompt_tokens;
      completion += choices[i].completion_tokens;
    }
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion}};
  }

  // The log-probabilities of `c`'s tokens not reported yet, in the request's shape.
  json TakeLogprobs(ChoiceState& c) const {
    if (!tokenizer) return nullptr;  // a model view without a tokenizer: not expected
    json out = logprobs == LogprobsShape::kChat
                   ? ChatLogprobs(c.logprobs, tokenizer->tokenizer())
                   : LegacyLogprobs(c.logprobs, tokenizer->tokenizer(), &c.text_offset);
    c.logprobs.clear();
    return out;
  }

  std::vector<std::shared_ptr<Call>> Calls() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<std::shared_ptr<Call>> calls;
    for (const ChoiceState& c : choices) {
      if (c.call) calls.push_back(c.call);
    }
    return calls;
  }

  void OnEvent(size_t index, const engine::StreamEvent& e) {
    std::vector<std::shared_ptr<Call>> cancel;
    {
      absl::MutexLock lock(&mu);
      if (ended) return;
      ChoiceState& c = choices[index];
      if (e.token >= 0 && logprobs != LogprobsShape::kNone) {
        c.logprobs.push_back({e.token, e.logprob, e.top_logprobs});
      }
      if (e.finished) {
        c.finish_reason = e.finish_reason;
        c.prompt_tokens = e.prompt_tokens;
        c.completion_tokens = e.completion_tokens;
      }
      const bool ok = stream ? OnStreamEvent(index, e) : OnWholeEvent(c, e);
      if (!ok) cancel = Calls();  // one choice failed (or the client left): the rest stop
    }
    for (const auto& call : cancel) call->Cancel();
  }

  // A whole response: the text so far; once every choice is done, the response. False when a
  // choice failed (the response is then its error).
  bool OnWholeEvent(ChoiceState& c, const engine::StreamEvent& e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    c.text += e.text;
    if (!e.finished) return true;
    if (!e.status.ok()) {
      // Cancelled by the server (drain deadline, engine stop) or failed: an error, not a
      // truncated 200. (When the client itself went away nobody reads this.)
      ended = true;
      const int status = e.finish_reason == engine::FinishReason::kCancelled ? 503 : 500;
      responder->Respond(
          WithRateLimit(net::JsonError(status, ToStd(e.status.message())), rate_limit));
      return false;
    }
    if (--open > 0) return true;
    ended = true;
    json out = Envelope();
    out["choices"] = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      ChoiceState& done = choices[i];
      json choice = {{"index", i}, {"finish_reason", FinishReasonText(done.finish_reason)}};
      // Parsed only when the request asked for tools: no copy of every reply's text otherwise.
      const ToolCallReply reply =
          tool_format == ToolCallFormat::kNone ? ToolCallReply{} : Reply(done.text);
      if (chat && !reply.calls.empty()) {
        choice["message"] = {
            {"role", "assistant"},
            {"content", reply.content.empty() ? json(nullptr) : json(reply.content)},
            {"tool_calls", ToolCallsJson(tool_format, reply.calls, /*streamed=*/false)}};
        choice["finish_reason"] = "tool_calls";
      } else if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", done.text}};
      } else {
        choice["text"] = done.text;
      }
      choice["logprobs"] = logprobs == LogprobsShape::kNone ? json(nullptr) : TakeLogprobs(done);
      out["choices"].push_back(std::move(choice));
    }
    out["usage"] = Usage();
    responder->Respond(
        WithRateLimit({200, "application/json", SafeDump(out) + "\n", {}}, rate_limit));
    return true;
  }

  // A whole reply's calls, parsed when the request asked for tools; the first alone without
  // parallel_tool_calls.
  ToolCallReply Reply(const std::string& text) const {
    ToolCallReply reply = ParseToolCalls(tool_format, text);
    if (!parallel_tool_calls && reply.calls.size() > 1) reply.calls.resize(1);
    return reply;
  }

  // One chunk of choice `index`: `delta` (chat) or `text`, its pending log-probabilities and
  // `finish_reason` (null while it runs), and the reply's tool calls when it has them. False when
  // the client cannot take it.
  bool SendChunk(size_t index, const std::string& text, const char* finish_reason,
                 const json& tool_calls = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ChoiceState& c = choices[index];
    json choice = {{"index", index},
                   {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}};
    if (chat) {
      choice["delta"] = json::object();
      if (!tool_calls.is_null()) choice["delta"]["tool_calls"] = tool_calls;
      if (!text.empty() || (!finish_reason && tool_calls.is_null())) {
        choice["delta"]["content"] = text;
      }
      if (!c.role_sent) choice["delta"]["role"] = "assistant";
      c.role_sent = true;
    } else {
      choice["text"] = text;
    }
    if (logprobs != LogprobsShape::kNone) choice["logprobs"] = TakeLogprobs(c);
    json chunk = Envelope();
    chunk["choices"] = json::array({std::move(choice)});
    return responder->Write("data: " + SafeDump(chunk) + "\n\n");
  }

  void EndStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ended = true;
    responder->Write("data: [DONE]\n\n");
    responder->Finish();
  }

  // The part of `e`'s text to send now: all of it, or with tools what StreamableBytes releases
  // (the rest waits in c.text for the end of the reply).
  std::string Streamable(ChoiceState& c, const engine::StreamEvent& e) const {
    if (tool_format == ToolCallFormat::kNone) return e.text;
    c.text += e.text;
    const size_t n = std::max(c.sent, StreamableBytes(tool_format, c.text));
    std::string out = c.text.substr(c.sent, n - c.sent);
    c.sent = n;
    return out;
  }

  // The end of a streamed reply with tools: its calls, or the text held back as content.
  bool SendHeld(size_t index, const char** finish_reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ChoiceState& c = choices[index];
    if (tool_format == ToolCallFormat::kNone || c.sent == c.text.size()) return true;
    ToolCallReply reply = Reply(c.text);
    if (reply.calls.empty()) {
      const std::string held = c.text.substr(c.sent);
      c.sent = c.text.size();
      return SendChunk(index, held, nullptr);
    }
    *finish_reason = "tool_calls";
    return SendChunk(index, "", nullptr,
                     ToolCallsJson(tool_format, reply.calls, /*streamed=*/true));
  }

  bool OnStreamEvent(size_t index, const engine::StreamEvent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ChoiceState& c = choices[index];
    const std::string text = Streamable(c, e);
    if (!text.empty() || (chat && !c.role_sent)) {
      if (!SendChunk(index, text, nullptr)) return false;
    }
    if (!e.finished) return true;
    if (!e.status.ok()) {
      // After streaming began, the client gets an explicit error, never a silent truncation.
      responder->Write("data: " +
                       SafeDump({{"error",
                                  {{"message", ToStd(e.status.message())},
                                   {"type", "server_error"},
                                   {"param", nullptr},
                                   {"code", nullptr}}}}) +
                       "\n\n");
      EndStream();
      return false;
    }
    const char* finish_reason = FinishReasonText(e.finish_reason);
    if (!SendHeld(index, &finish_reason)) return false;
    if (!SendChunk(index, "", finish_reason)) return false;
    if (--open > 0) return true;
    if (include_usage) {
      json usage = Envelope();
      usage["choices"] = json::array();
      usage["usage"] = Usage();
      responder->Write("data: " + SafeDump(usage) + "\n\n");
    }
    EndStream();
    return true;
  }
};

// Starts every choice of `request` (under the exchange's lock, so no event is handled before
// all are started). On a refusal the choices already started are returned to be cancelled.
absl::Status StartChoices(Frontend& frontend, std::vector<TextRequest> requests,
                          const std::shared_ptr<Exchange>& exchange,
                          std::vector<std::shared_ptr<Call>>* cancel) {
  absl::MutexLock lock(&exchange->mu);
  exchange->choices.resize(requests.size());
  exchange->open = requests.size();
  for (size_t i = 0; i < requests.size(); ++i) {
    auto call = frontend.Start(
        std::move(requests[i]),
        [exchange, i](const engine::StreamEvent& e) { exchange->OnEvent(i, e); },
        &exchange->rate_limit);
    if (!call.ok()) {
      exchange->ended = true;
      *cancel = exchange->Calls();
      return call.status();
    }
    exchange->choices[i].call = *call;
  }
  const Call& first = *exchange->choices[0].call;
  exchange->model = first.model();
  exchange->tokenizer = first.tokenizer();
  if (exchange->tools && exchange->tokenizer && exchange->tokenizer->chat_template()) {
    exchange->tool_format =
        DetectToolCallFormat(exchange->tokenizer->chat_template()->source(/*tools=*/true));
  }
  exchange->responder->SetModel(first.model());
  if (exchange->stream) {
    exchange->responder->StartStream(200, "text/event-stream",
                                     RateLimitHeaders(exchange->rate_limit));
  }
  return absl::OkStatus();
}

// A request for a model scaled to zero waits for its replica (gateway/activator.h): HandleGenerate
// runs again once the model is served; a refusal (the queue full, the timeout) is a 503 whose
// Retry-After leaves the replica time to start.
bool ParkForReplica(Frontend& frontend, bool chat, const net::HttpRequest& req,
                    const std::shared_ptr<ApiResponder>& responder, const absl::Status& refusal,
                    const std::string& model);

void HandleGenerate(Frontend& frontend, bool chat, const net::HttpRequest& req,
                    const std::shared_ptr<ApiResponder>& responder, bool parked = false) {
  absl::StatusOr<std::string> tenant = frontend.Authorize(req.Header("authorization"));
  if (!tenant.ok()) {
    responder->Respond(StatusResponse(tenant.status()));
    return;
  }
  OpenAiRequest parsed;
  std::optional<ApiError> error = ParseOpenAiRequest(req.body, chat, &parsed);
  responder->SetModel(frontend.ModelLabel(parsed.model));
  if (error) {
    responder->Respond(WithRateLimit(ErrorResponse(*error), frontend.RateLimitState(*tenant)));
    return;
  }
  auto exchange = std::make_shared<Exchange>();
  exchange->chat = chat;
  exchange->stream = parsed.stream;
  exchange->include_usage = parsed.include_usage;
  exchange->n = parsed.n;
  exchange->logprobs = parsed.logprobs;
  exchange->tools = parsed.tools;
  exchange->parallel_tool_calls = parsed.parallel_tool_calls;
  exchange->responder = responder;
  exchange->seed = parsed.seeded ? *parsed.prompts[0].sampling.seed : NewSeed();
  exchange->id = StrCat(chat ? "chatcmpl-" : "cmpl-", responder->request_id());
  exchange->created = UnixNow();
  std::vector<TextRequest> requests = ChoiceRequests(parsed, exchange->seed);
  for (TextRequest& r : requests) {
    r.tenant = *tenant;
    for (const std::string& name : frontend.RouteHeaders()) {
      if (auto value = req.Header(name); !value.empty()) r.headers[name] = std::string(value);
    }
    // A caller's trace id (as proxies set it) becomes the request id every node logs; one it
    // may not use is refused by the Frontend, naming it.
    r.request_id = responder->sent_request_id().empty() ? responder->request_id()
                                                        : responder->sent_request_id();
  }
  std::vector<std::shared_ptr<Call>> cancel;
  absl::Status started = StartChoices(frontend, std::move(requests), exchange, &cancel);
  for (const auto& call : cancel) call->Cancel();
  if (!started.ok()) {
    if (!parked && ParkForReplica(frontend, chat, req, responder, started, parsed.model)) return;
    responder->Respond(RateLimitedStatusResponse(started, exchange->rate_limit));
    return;
  }
  responder->OnClientGone([exchange] {
    std::vector<std::shared_ptr<Call>> calls;
    {
      absl::MutexLock lock(&exchange->mu);
      calls = exchange->Calls();
    }
    for (const auto& call : calls) call->Cancel();
  });
}

bool ParkForReplica(Frontend& frontend, bool chat, const net::HttpRequest& req,
                    const std::shared_ptr<ApiResponder>& responder, const absl::Status& refusal,
                    const std::string& model) {
  if (!frontend.MayWaitForReplica(refusal, model)) return false;
  Activator& activator = frontend.activator();
  auto refuse = [responder, retry = activator.retry_after_s()](const absl::Status& s) {
    net::HttpResponse response = StatusResponse(s);
    std::erase_if(response.headers, [](const auto& h) { return h.first == "Retry-After"; });
    response.headers.emplace_back("Retry-After", StrCat(retry));
    responder->Respond(std::move(response));
  };
  absl::Status held = activator.Park(
      model, absl::Now(),
      {.resume = [&frontend, chat, req,
                  responder] { HandleGenerate(frontend, chat, req, responder, /*parked=*/true); },
       .refuse = refuse,
       .gone = [responder] { return responder->ClientGone(); }});
  if (!held.ok()) refuse(held);
  return true;
}

json ModelObject(const ModelView& m) {
  return {{"id", m.name},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "exaserve"},
          {"version", m.version},
          {"max_context", m.max_context},
          {"max_model_len", m.max_context}};
}

// "%40" → "@": clients may escape the id in the path; a malformed escape stays as it is.
std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

net::HttpResponse ListModels(Frontend& frontend, const net::HttpRequest& req) {
  if (auto tenant = frontend.Authorize(req.Header("authorization")); !tenant.ok()) {
    return StatusResponse(tenant.status());
  }
  json data = json::array();
  for (const ModelView& m : frontend.Models()) data.push_back(ModelObject(m));
  return {200, "application/json", SafeDump(json({{"object", "list"}, {"data", data}})) + "\n", {}};
}

// GET /v1/models/{id}: the model as /v1/models lists it; the id is NAME or NAME@VERSION.
net::HttpResponse RetrieveModel(Frontend& frontend, const net::HttpRequest& req,
                                ApiResponder& responder) {
  if (auto tenant = frontend.Authorize(req.Header("authorization")); !tenant.ok()) {
    return StatusResponse(tenant.status());
  }
  constexpr std::string_view kPrefix = "/v1/models/";
  const std::string id = PercentDecode(std::string_view(req.path).substr(kPrefix.size()));
  absl::StatusOr<ModelView> model = frontend.FindModel(id);
  if (!model.ok()) return StatusResponse(model.status());
  responder.SetModel(model->name);
  return {200, "application/json", SafeDump(ModelObject(*model)) + "\n", {}};
}

}  // namespace

void AddOpenAiRoutes(const RouteAdder& add, Frontend& frontend) {
  // Each handler wraps its responder so that every answer carries x-request-id and is counted.
  auto route = [&add, &frontend](const char* method, const char* path, const char* endpoint,
                                 auto handle) {
    add(method, path,
        [&frontend, endpoint, handle](net::HttpRequest req,
                                      std::shared_ptr<net::HttpResponder> inner) {
          auto responder =
              std::make_shared<ApiResponder>(std::move(inner), frontend, endpoint, req);
          handle(req, responder);
        });
  };
  route("POST", "/v1/completions", "completions",
        [&frontend](const net::HttpRequest& req, const std::shared_ptr<ApiResponder>& r) {
          HandleGenerate(frontend, /*chat=*/false, req, r);
        });
  route("POST", "/v1/chat/completions", "chat_completions",
        [&frontend](const net::HttpRequest& req, const std::shared_ptr<ApiResponder>& r) {
          HandleGenerate(frontend, /*chat=*/true, req, r);
        });
  route("GET", "/v1/models", "models",
        [&frontend](const net::HttpRequest& req, const std::shared_ptr<ApiResponder>& r) {
          r->SetModel("none");
          r->Respond(ListModels(frontend, req));
        });
  route("GET", "/v1/models/*", "model",
        [&frontend](const net::HttpRequest& req, const std::shared_ptr<ApiResponder>& r) {
          r->Respond(RetrieveModel(frontend, req, *r));
        });
  route("POST", "/tokenize", "tokenize",
        [&frontend](const net::HttpRequest& req, const std::shared_ptr<ApiResponder>& r) {
          HandleTokenize(frontend, req, r);
        });
  route("POST", "/detokenize", "detokenize",
        [&frontend](const net::HttpRequest& req, const std::shared_ptr<ApiResponder>& r) {
          HandleDetokenize(frontend, req, r);
        });
}

void AddOpenAiRoutes(net::HttpServer& server, Frontend& frontend) {
  AddOpenAiRoutes(
      [&server](std::string method, std::string path, net::HttpHandler handler) {
        server.AddRoute(std::move(method), std::move(path), std::move(handler));
      },
      frontend);
}

}  // namespace exa::gateway
