// The OpenAI routes end to end over a fake replica: n choices and prompt batches come back
// indexed as OpenAI does with usage summed, log-probabilities in both shapes (streamed too),
// /v1/models/{id} and /tokenize answer as vLLM's do, every response carries x-request-id, errors
// name the field with OpenAI's string code, and responses are counted by endpoint, model and
// status without a series per unknown model name; a reply's tool calls come back as
// message.tool_calls, whole and streamed, without a marker leaking into the content.
#include "gateway/openai_api.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <span>

#include "engine/structured/json_matcher.h"
#include "fake_backend.h"
#include "gateway/tool_calls.h"

namespace exa::gateway {
namespace {

using json = nlohmann::json;

// What a route answered: a whole response, or a stream's status and chunks.
class FakeResponder final : public net::HttpResponder {
 public:
  void Respond(net::HttpResponse r) override {
    status = r.status;
    headers = r.headers;
    body = r.body;
    done = true;
  }
  void StartStream(int s, std::string,
                   std::vector<std::pair<std::string, std::string>> h) override {
    status = s;
    headers = std::move(h);
  }
  bool Write(std::string data) override {
    body += data;
    return true;
  }
  void Finish() override { done = true; }
  bool ClientGone() const override { return false; }
  void OnClientGone(std::function<void()> callback) override { gone = std::move(callback); }

  std::string Header(const std::string& name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return "";
  }
  json Json() const { return json::parse(body); }
  // A stream's events, [DONE] left out.
  std::vector<json> Events() const {
    std::vector<json> out;
    for (size_t at = body.find("data: "); at != std::string::npos; at = body.find("data: ", at)) {
      const size_t end = body.find("\n\n", at);
      const std::string data = body.substr(at + 6, end - at - 6);
      if (data != "[DONE]") out.push_back(json::parse(data));
      at = end;
    }
    return out;
  }

  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool done = false;
  std::function<void()> gone;
};

struct Api {
  explicit Api(const std::string& chat_template = "")
      : backend(chat_template),
        table(router::Policy::kRoundRobin, 1),
        frontend({}, backend, table, registry) {
    table.Upsert({"n1/m@v1#0", "m", "v1", {}});
    table.Report("n1/m@v1#0", {0, 0, true});
    AddOpenAiRoutes(
        [this](std::string method, std::string path, net::HttpHandler handler) {
          routes[method + " " + path] = std::move(handler);
        },
        frontend);
  }
  std::shared_ptr<FakeResponder> Call(const std::string& method, const std::string& route,
                                      const std::string& body, const std::string& path = "",
                                      std::string request_id = "") {
    net::HttpRequest req;
    req.method = method;
    req.path = path.empty() ? route : path;
    req.body = body;
    if (!request_id.empty()) req.headers.emplace_back("x-request-id", std::move(request_id));
    auto responder = std::make_shared<FakeResponder>();
    routes.at(method + " " + route)(req, responder);
    return responder;
  }
  std::shared_ptr<FakeResponder> Post(const std::string& route, const json& body,
                                      std::string request_id = "") {
    return Call("POST", route, body.dump(), "", std::move(request_id));
  }
  // Request `i` generates `text` one character a token (ids of the characters), then stops.
  void Generate(size_t i, const std::string& text, float logprob = -0.5f) {
    for (char c : text) {
      const int32_t id = backend.tokenizer().Encode(std::string(1, c), false).at(0);
      backend.Token(i, id, std::string(1, c), logprob, {{id, logprob}});
    }
    backend.Finish(i, absl::OkStatus());
  }
  bool Counted(const std::string& line) const {
    return registry.Expose().find(line) != std::string::npos;
  }

  metrics::Registry registry;
  FakeBackend backend;
  router::ReplicaTable table;
  Frontend frontend;
  std::map<std::string, net::HttpHandler> routes;
};

TEST_CASE("n choices of a prompt batch come back in OpenAI's order with usage summed") {
  Api api;
  auto r = api.Post(
      "/v1/completions",
      {{"prompt", json::parse(R"(["1+1=", "2+2="])")}, {"n", 2}, {"max_tokens", 4}, {"seed", 7}});
  REQUIRE(api.backend.submitted.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(api.backend.submitted[i].second.sampling.seed == 7 + i % 2);  // sample j: seed + j
  }
  CHECK(api.backend.submitted[0].second.prompt_tokens ==
        api.backend.submitted[1].second.prompt_tokens);
  CHECK(api.backend.submitted[1].second.prompt_tokens !=
        api.backend.submitted[2].second.prompt_tokens);
  // They finish out of order; the response waits for all four.
  api.Generate(3, "4");
  api.Generate(0, "2");
  api.Generate(2, "44");
  CHECK_FALSE(r->done);
  api.Generate(1, "22");
  REQUIRE(r->status == 200);
  json out = r->Json();
  REQUIRE(out["choices"].size() == 4);
  const std::vector<std::string> texts = {"2", "22", "44", "4"};
  for (size_t i = 0; i < 4; ++i) {
    CHECK(out["choices"][i]["index"] == i);
    CHECK(out["choices"][i]["text"] == texts[i]);
  }
  CHECK(out["seed"] == 7);
  const int64_t prompt = static_cast<int64_t>(api.backend.submitted[0].second.prompt_tokens.size() +
                                              api.backend.submitted[2].second.prompt_tokens.size());
  CHECK(out["usage"]["prompt_tokens"] == prompt);  // each prompt once, not once per choice
  CHECK(out["usage"]["completion_tokens"] == 6);
}

TEST_CASE("Chat logprobs come in the chat shape, whole and streamed with n") {
  Api api;
  const json messages = {{{"role", "user"}, {"content", "1+1="}}};
  auto whole = api.Post("/v1/chat/completions",
                        {{"messages", messages}, {"logprobs", true}, {"top_logprobs", 1}});
  REQUIRE(api.backend.submitted.size() == 1);
  CHECK(api.backend.submitted[0].second.sampling.logprobs);
  CHECK(api.backend.submitted[0].second.sampling.top_logprobs == 1);
  api.Generate(0, "2");
  json content = whole->Json()["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == 1);
  CHECK(content[0]["token"] == "2");
  CHECK(content[0]["logprob"] == -0.5);
  CHECK(content[0]["bytes"] == json::array({int{'2'}}));
  CHECK(content[0]["top_logprobs"][0]["token"] == "2");

  auto stream = api.Post("/v1/chat/completions", {{"messages", messages},
                                                  {"logprobs", true},
                                                  {"n", 2},
                                                  {"stream", true},
                                                  {"stream_options", {{"include_usage", true}}}});
  REQUIRE(stream->status == 200);
  api.Generate(2, "3");
  api.Generate(1, "12");
  std::vector<json> events = stream->Events();
  std::map<int, std::string> text;
  std::map<int, int> logprobs;
  for (const json& e : events) {
    if (e["choices"].empty()) continue;
    const int index = e["choices"][0]["index"];
    text[index] += e["choices"][0]["delta"].value("content", "");
    logprobs[index] += static_cast<int>(e["choices"][0]["logprobs"]["content"].size());
  }
  CHECK(text == std::map<int, std::string>{{0, "12"}, {1, "3"}});
  CHECK(logprobs == std::map<int, int>{{0, 2}, {1, 1}});
  REQUIRE(stream->done);
  CHECK(events.back()["usage"]["completion_tokens"] == 3);
  CHECK(stream->body.ends_with("data: [DONE]\n\n"));
}

TEST_CASE("Legacy logprobs: offsets run on across a stream's chunks") {
  Api api;
  auto r = api.Post("/v1/completions",
                    {{"prompt", "12+30="}, {"logprobs", 1}, {"stream", true}, {"max_tokens", 4}});
  api.Generate(0, "42");
  std::vector<json> events = r->Events();
  std::vector<int64_t> offsets;
  std::string tokens;
  for (const json& e : events) {
    const json& lp = e["choices"][0]["logprobs"];
    for (const json& o : lp["text_offset"]) offsets.push_back(o);
    for (const json& t : lp["tokens"]) tokens += t.get<std::string>();
  }
  CHECK(tokens == "42");
  CHECK(offsets == std::vector<int64_t>{0, 1});
}

TEST_CASE("A failed choice fails the request and the others are cancelled") {
  Api api;
  auto r = api.Post("/v1/completions", {{"prompt", "1+1="}, {"n", 3}});
  REQUIRE(api.backend.submitted.size() == 3);
  api.Generate(0, "2");
  api.backend.Finish(1, absl::InternalError("replica broke"));
  CHECK(r->status == 500);
  CHECK(r->Json()["error"]["message"] == "replica broke");
  CHECK(api.backend.cancelled.size() >= 1);  // the third, still running
  api.Generate(2, "2");                      // late: nobody answers twice
  CHECK(r->status == 500);
}

TEST_CASE("GET /v1/models/{id} takes NAME and NAME@VERSION; an unknown one is a 404") {
  Api api;
  for (const char* path : {"/v1/models/m", "/v1/models/m@v1", "/v1/models/m%40v1"}) {
    auto r = api.Call("GET", "/v1/models/*", "", path);
    INFO(path);
    REQUIRE(r->status == 200);
    CHECK(r->Json()["id"] == "m");
    CHECK(r->Json()["version"] == "v1");
    CHECK(r->Json()["object"] == "model");
  }
  auto missing = api.Call("GET", "/v1/models/*", "", "/v1/models/nope@v1");
  CHECK(missing->status == 404);
  const json error = missing->Json()["error"];
  CHECK(error["code"] == "model_not_found");
  CHECK(error["param"] == "model");
  CHECK(error["type"] == "not_found_error");
  CHECK(error["message"].get<std::string>().find("m@v1") != std::string::npos);  // what exists
}

TEST_CASE("Every response carries x-request-id: the caller's, else a generated one") {
  Api api;
  auto r = api.Post("/v1/completions", {{"prompt", "1+1="}}, "trace-7");
  api.Generate(0, "2");
  CHECK(r->Header("x-request-id") == "trace-7");
  CHECK(r->Json()["id"] == "cmpl-trace-7");
  CHECK(api.backend.submitted[0].second.request_id == "trace-7");
  auto generated = api.Post("/v1/chat/completions", {{"messages", "no"}});
  CHECK(generated->status == 400);
  CHECK(generated->Header("x-request-id").size() == 16);
  auto bad = api.Post("/v1/completions", {{"prompt", "1+1="}}, "a b");  // refused, not echoed
  CHECK(bad->status == 400);
  CHECK(bad->Json()["error"]["param"] == "request_id");
  CHECK(bad->Header("x-request-id").size() == 16);
  CHECK(api.Call("GET", "/v1/models", "")->Header("x-request-id").size() == 16);
}

TEST_CASE("Errors name the field at fault, with OpenAI's string code or null") {
  Api api;
  auto long_chat = api.Post(
      "/v1/chat/completions",
      {{"messages", {{{"role", "user"}, {"content", std::string(600, '1')}}}}, {"max_tokens", 2}});
  CHECK(long_chat->status == 400);
  CHECK(long_chat->Json()["error"]["param"] == "messages");
  CHECK(long_chat->Json()["error"]["code"] == "context_length_exceeded");
  auto oov = api.Post("/v1/completions", {{"prompt", {1, 2, 100000}}});
  CHECK(oov->Json()["error"]["param"] == "prompt");
  CHECK(oov->Json()["error"]["code"] == nullptr);
  auto over = api.Post("/v1/completions", {{"prompt", "1"}, {"n", 17}});
  CHECK(over->Json()["error"]["param"] == "n");
  CHECK(api.backend.submitted.empty());
}

TEST_CASE("/tokenize and /detokenize answer in vLLM's shape") {
  Api api;
  auto t = api.Post("/tokenize", {{"model", "m"}, {"prompt", "12+34="}});
  REQUIRE(t->status == 200);
  const std::vector<int32_t> expected = api.backend.tokenizer().Encode("12+34=", true);
  CHECK(t->Json()["tokens"] == expected);
  CHECK(t->Json()["count"] == expected.size());
  CHECK(t->Json()["max_model_len"] == 512);
  auto chat = api.Post("/tokenize", {{"messages", {{{"role", "user"}, {"content", "12+34="}}}}});
  CHECK(chat->Json()["tokens"] == expected);  // no template: as chat completions encodes it
  auto d = api.Post("/detokenize", {{"tokens", api.backend.tokenizer().Encode("12+34=", false)}});
  CHECK(d->Json()["prompt"] == "12+34=");
  auto bad = api.Post("/detokenize", {{"tokens", {1, -2}}});
  CHECK(bad->status == 400);
  CHECK(bad->Json()["error"]["param"] == "tokens");
  CHECK(api.Post("/tokenize", {{"model", "x"}, {"prompt", "1"}})->status == 404);
  CHECK(api.Post("/tokenize", {{"prompt", 5}})->Json()["error"]["param"] == "prompt");
}

TEST_CASE("Responses are counted by endpoint, model and status; unknown models are one label") {
  Api api;
  api.Post("/v1/completions", {{"prompt", "1"}, {"temperature", -1}});
  for (const char* name : {"a", "b", "c"})
    api.Post("/v1/completions", {{"model", name}, {"prompt", "1"}});
  CHECK(
      api.Counted("exaserve_gateway_http_responses_total{endpoint=\"completions\",model=\"m\",code="
                  "\"400\"} 1"));
  CHECK(
      api.Counted("exaserve_gateway_http_responses_total{endpoint=\"completions\",model="
                  "\"unknown\",code=\"404\"} 3"));
  CHECK_FALSE(api.Counted("model=\"a\""));
}

}  // namespace
}  // namespace exa::gateway

namespace exa::gateway {
namespace {

// Renders the number of tools after the prompt, and names the Hermes marker (in a comment), so
// the gateway parses <tool_call> blocks in the replies.
constexpr const char* kToolTemplate =
    "{# <tool_call> #}{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
    "{% if tools %}+{{ tools | length }}{% endif %}=";

const json kWeather = {
    {"type", "function"},
    {"function",
     {{"name", "get_weather"},
      {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}};

// Request `i` writes `pieces`, one token each, then stops.
void Write(Api& api, size_t i, const std::vector<std::string>& pieces) {
  for (const std::string& piece : pieces) api.backend.Token(i, 5, piece);
  api.backend.Finish(i, absl::OkStatus());
}

const std::vector<std::string> kCallReply = {"Let me check.", "<tool",
                                             "_call>\n{\"name\": \"get_weather\", ",
                                             "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"};

// A streamed chat reply's content deltas joined, and its tool_calls delta.
std::pair<std::string, json> Streamed(const FakeResponder& stream) {
  std::string content;
  json calls;
  for (const json& e : stream.Events()) {
    const json& delta = e["choices"][0]["delta"];
    content += delta.value("content", "");
    if (delta.contains("tool_calls")) calls = delta["tool_calls"];
  }
  return {content, calls};
}

TEST_CASE("A reply's tool calls come back as message.tool_calls, whole and streamed") {
  Api api(kToolTemplate);
  const json messages = {{{"role", "user"}, {"content", "1+1"}}};
  auto whole = api.Post("/v1/chat/completions",
                        {{"messages", messages}, {"tools", json::array({kWeather})}});
  REQUIRE(api.backend.submitted.size() == 1);
  // The template saw the tools.
  CHECK(api.backend.submitted[0].second.prompt_tokens ==
        api.backend.tokenizer().Encode("<s>1+1+1=", false));
  Write(api, 0, kCallReply);
  REQUIRE(whole->status == 200);
  const json choice = whole->Json()["choices"][0];
  CHECK(choice["finish_reason"] == "tool_calls");
  CHECK(choice["message"]["content"] == "Let me check.");
  REQUIRE(choice["message"]["tool_calls"].size() == 1);
  const json call = choice["message"]["tool_calls"][0];
  CHECK(call["type"] == "function");
  CHECK(call["id"].get<std::string>().starts_with("call_"));
  CHECK(call["function"]["name"] == "get_weather");
  CHECK(json::parse(call["function"]["arguments"].get<std::string>()) == json({{"city", "Paris"}}));

  auto stream =
      api.Post("/v1/chat/completions",
               {{"messages", messages}, {"tools", json::array({kWeather})}, {"stream", true}});
  Write(api, 1, kCallReply);
  const auto [content, calls] = Streamed(*stream);
  CHECK(content == "Let me check.");  // no part of the marker leaks
  REQUIRE(calls.size() == 1);
  CHECK(calls[0]["index"] == 0);
  CHECK(calls[0]["function"]["name"] == "get_weather");
  CHECK(stream->Events().back()["choices"][0]["finish_reason"] == "tool_calls");
}

TEST_CASE("A reply that is not a call streams as text, held back only while it might be one") {
  Api api(kToolTemplate);
  const json messages = {{{"role", "user"}, {"content", "1+1"}}};
  auto stream =
      api.Post("/v1/chat/completions",
               {{"messages", messages}, {"tools", json::array({kWeather})}, {"stream", true}});
  Write(api, 0, {"2 <tool", "s> are", " fun <tool_call>not json"});
  std::vector<std::string> deltas;
  for (const json& e : stream->Events()) {
    const std::string text = e["choices"][0]["delta"].value("content", "");
    if (!text.empty()) deltas.push_back(text);
  }
  // "<tool" waits until "s>" shows it is no marker; a malformed call ends as text.
  CHECK(deltas == std::vector<std::string>{"2 ", "<tools> are", " fun ", "<tool_call>not json"});
  CHECK(stream->Events().back()["choices"][0]["finish_reason"] == "stop");

  // tool_choice "none": the template gets no tools and the reply is text.
  auto none = api.Post(
      "/v1/chat/completions",
      {{"messages", messages}, {"tools", json::array({kWeather})}, {"tool_choice", "none"}});
  CHECK(api.backend.submitted[1].second.prompt_tokens ==
        api.backend.tokenizer().Encode("<s>1+1=", false));
  Write(api, 1, kCallReply);
  CHECK(none->Json()["choices"][0]["finish_reason"] == "stop");
  CHECK(none->Json()["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>") !=
        std::string::npos);
}

TEST_CASE("Presence and frequency penalties reach the replica; out of range, a 400 naming them") {
  Api api;
  auto ok = api.Post("/v1/completions",
                     {{"prompt", "1+1="}, {"presence_penalty", 0.5}, {"frequency_penalty", -1}});
  REQUIRE(api.backend.submitted.size() == 1);
  CHECK(api.backend.submitted[0].second.sampling.presence_penalty == 0.5f);
  CHECK(api.backend.submitted[0].second.sampling.frequency_penalty == -1.0f);
  for (const char* field : {"presence_penalty", "frequency_penalty"}) {
    auto bad = api.Post("/v1/chat/completions",
                        {{"messages", {{{"role", "user"}, {"content", "1+1"}}}}, {field, 2.5}});
    CHECK(bad->status == 400);
    CHECK(bad->Json()["error"]["param"] == field);
    CHECK(bad->Json()["error"]["message"].get<std::string>().find("outside [-2, 2]") !=
          std::string::npos);
  }
  CHECK(api.backend.submitted.size() == 1);
}

TEST_CASE("min_p reaches the replica; outside [0, 1] or not a number, a 400 naming it") {
  Api api;
  api.Post("/v1/completions", {{"prompt", "1+1="}, {"min_p", 0.05}, {"temperature", 1}});
  REQUIRE(api.backend.submitted.size() == 1);
  CHECK(api.backend.submitted[0].second.sampling.min_p == 0.05f);
  for (const json& value : {json(1.5), json(-0.1), json("high")}) {
    auto bad = api.Post("/v1/chat/completions",
                        {{"messages", {{{"role", "user"}, {"content", "1+1"}}}}, {"min_p", value}});
    CHECK(bad->status == 400);
    CHECK(bad->Json()["error"]["param"] == "min_p");
  }
  CHECK(api.backend.submitted.size() == 1);
}

TEST_CASE("logit_bias reaches the replica as token ids; bad keys and values name the field") {
  Api api;
  auto ok =
      api.Post("/v1/completions", {{"prompt", "1+1="}, {"logit_bias", {{"17", -100}, {"3", 2.5}}}});
  REQUIRE(api.backend.submitted.size() == 1);
  using Bias = std::vector<std::pair<int32_t, float>>;
  Bias bias = api.backend.submitted[0].second.sampling.logit_bias;
  std::sort(bias.begin(), bias.end());
  CHECK(bias == Bias{{3, 2.5f}, {17, -100.0f}});
  for (const json& bad : {json({{"x", 1}}), json({{"-1", 1}}), json({{"5", 101}}),
                          json({{"5", "1"}}), json(json::array({1}))}) {
    auto refused = api.Post("/v1/completions", {{"prompt", "1+1="}, {"logit_bias", bad}});
    CHECK(refused->status == 400);
    CHECK(refused->Json()["error"]["param"] == "logit_bias");
  }
  CHECK(api.backend.submitted.size() == 1);
}

TEST_CASE("vLLM's stop_token_ids and ignore_eos reach the replica; bad ids name the field") {
  Api api;
  auto ok = api.Post("/v1/completions",
                     {{"prompt", "1+1="}, {"stop_token_ids", {7, 9}}, {"ignore_eos", true}});
  REQUIRE(api.backend.submitted.size() == 1);
  CHECK(api.backend.submitted[0].second.stop_token_ids == std::vector<int32_t>{7, 9});
  CHECK(api.backend.submitted[0].second.ignore_eos);
  for (const json& bad : {json(-1), json("7"), json(json::array({1, -3}))}) {
    auto refused = api.Post("/v1/completions", {{"prompt", "1+1="}, {"stop_token_ids", bad}});
    CHECK(refused->status == 400);
    CHECK(refused->Json()["error"]["param"] == "stop_token_ids");
  }
  auto flag = api.Post("/v1/completions", {{"prompt", "1+1="}, {"ignore_eos", "yes"}});
  CHECK(flag->Json()["error"]["param"] == "ignore_eos");
  CHECK(api.backend.submitted.size() == 1);
}

// Each completion request of the prompt "1+1=" plus `fields` is a 400 naming `param`.
void CheckRefused(Api& api, std::span<const std::pair<json, std::string>> cases) {
  for (const auto& [fields, param] : cases) {
    json body = {{"prompt", "1+1="}};
    body.update(fields);
    auto refused = api.Post("/v1/completions", body);
    INFO(body.dump() << " -> " << refused->body);
    CHECK(refused->status == 400);
    CHECK(refused->Json()["error"]["param"] == param);
  }
}

TEST_CASE("vLLM's min_tokens reaches the replica; past max_tokens or negative, a 400 naming it") {
  Api api;
  api.Post("/v1/completions", {{"prompt", "1+1="}, {"min_tokens", 3}, {"max_tokens", 5}});
  REQUIRE(api.backend.submitted.size() == 1);
  CHECK(api.backend.submitted[0].second.min_tokens == 3);
  CHECK(api.backend.submitted[0].second.max_tokens == 5);
  const std::pair<json, std::string> bad[] = {
      {{{"min_tokens", 6}, {"max_tokens", 5}}, "min_tokens"},
      {{{"min_tokens", -1}}, "min_tokens"},
      {{{"min_tokens", "3"}}, "min_tokens"}};
  CheckRefused(api, bad);
  CHECK(api.backend.submitted.size() == 1);
}

TEST_CASE("response_format and guided_json reach the replica as a compiled schema") {
  Api api;
  auto object = api.Post("/v1/completions",
                         {{"prompt", "1+1="}, {"response_format", {{"type", "json_object"}}}});
  REQUIRE(api.backend.submitted.size() == 1);
  CHECK(api.backend.submitted[0].second.json_schema == R"({"type":"object"})");
  CHECK(api.backend.submitted[0].second.grammar != nullptr);
  const json schema = {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}}}}}};
  api.Post("/v1/completions",
           {{"prompt", "1+1="},
            {"response_format",
             {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}}}}}});
  api.Post("/v1/completions", {{"prompt", "1+1="}, {"guided_json", schema.dump()}});
  api.Post("/v1/completions", {{"prompt", "1+1="}, {"response_format", {{"type", "text"}}}});
  REQUIRE(api.backend.submitted.size() == 4);
  CHECK(json::parse(api.backend.submitted[1].second.json_schema) == schema);
  CHECK(json::parse(api.backend.submitted[2].second.json_schema) == schema);
  CHECK(api.backend.submitted[3].second.grammar == nullptr);
  // Refused, naming the field: a bad shape, an unsupported keyword, both fields, with tools.
  const std::pair<json, std::string> bad[] = {
      {{{"response_format", {{"type", "json_schema"}}}}, "response_format"},
      {{{"response_format", "json"}}, "response_format"},
      {{{"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"schema", {{"type", "string"}, {"pattern", "a(?!b)"}}}}}}}},
       "response_format"},
      {{{"guided_json", 5}}, "guided_json"},
      {{{"guided_json", "{"}}, "guided_json"},
      {{{"guided_json", schema}, {"response_format", {{"type", "json_object"}}}}, "guided_json"},
  };
  CheckRefused(api, bad);
  auto unique =
      api.Post("/v1/completions",
               {{"prompt", "1+1="}, {"guided_json", {{"type", "array"}, {"uniqueItems", true}}}});
  CHECK(unique->Json()["error"]["message"] ==
        "guided_json: schema.uniqueItems: not supported; supported: type, nullable, enum, const, "
        "anyOf, oneOf, allOf (one member), $ref, $defs, definitions, properties, required, "
        "additionalProperties, items, prefixItems, minItems, maxItems, minLength, maxLength, "
        "pattern, minimum, maximum, exclusiveMinimum, exclusiveMaximum");
  auto lookahead =
      api.Post("/v1/completions", {{"prompt", "1+1="}, {"guided_json", {{"pattern", "(?=a)"}}}});
  CHECK(lookahead->Json()["error"]["message"] ==
        "guided_json: schema.pattern: at byte 1: lookahead and lookbehind ((?=, (?!, (?<=, (?<!) "
        "are not supported");
  CHECK(api.backend.submitted.size() == 4);
}

TEST_CASE(
    "guided_choice, guided_regex and structured_outputs reach the replica; the rest is refused") {
  Api api;
  api.Post("/v1/completions", {{"prompt", "1+1="}, {"guided_choice", {"yes", "no"}}});
  api.Post("/v1/completions",
           {{"prompt", "1+1="}, {"structured_outputs", {{"choice", {"2", "3"}}}}});
  api.Post("/v1/completions",
           {{"prompt", "1+1="}, {"structured_outputs", {{"json", {{"type", "integer"}}}}}});
  api.Post("/v1/completions", {{"prompt", "1+1="}, {"guided_regex", "[0-9]{3}"}});
  api.Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "1+1"}}}},
                                    {"structured_outputs", {{"regex", "(yes|no)"}}}});
  REQUIRE(api.backend.submitted.size() == 5);
  const engine::GenerateRequest& choice = api.backend.submitted[0].second;
  CHECK(choice.choices == std::vector<std::string>{"yes", "no"});
  REQUIRE(choice.grammar != nullptr);
  engine::structured::JsonMatcher m(choice.grammar);
  CHECK((m.Advance("no") && m.Terminal()));
  CHECK(api.backend.submitted[1].second.choices == std::vector<std::string>{"2", "3"});
  CHECK(api.backend.submitted[2].second.json_schema == R"({"type":"integer"})");
  const engine::GenerateRequest& regex = api.backend.submitted[3].second;
  CHECK(regex.regex == "[0-9]{3}");
  engine::structured::JsonMatcher digits(regex.grammar);
  CHECK_FALSE(digits.Accepts("a"));
  CHECK((digits.Advance("123") && digits.Terminal()));
  CHECK(api.backend.submitted[4].second.regex == "(yes|no)");

  const std::pair<json, std::string> bad[] = {
      {{{"guided_choice", "yes"}}, "guided_choice"},
      {{{"guided_choice", json::array()}}, "guided_choice"},
      {{{"guided_choice", {"yes", 1}}}, "guided_choice"},
      {{{"guided_choice", {"yes", ""}}}, "guided_choice"},
      {{{"guided_choice", {"a"}}, {"guided_json", {{"type", "string"}}}}, "guided_choice"},
      {{{"structured_outputs", {{"grammar", "root ::= \"a\""}}}}, "structured_outputs"},
      {{{"structured_outputs", {{"choice", {"a"}}}}, {"guided_choice", {"b"}}},
       "structured_outputs"},
      {{{"structured_outputs", {{"regex", "a+"}}}, {"guided_regex", "b"}}, "structured_outputs"},
      {{{"guided_regex", 5}}, "guided_regex"},
      {{{"guided_regex", ""}}, "guided_regex"},
      {{{"guided_regex", "(a"}}, "guided_regex"},
      {{{"guided_regex", "a"}, {"guided_choice", {"a"}}}, "guided_regex"},
      {{{"guided_grammar", "root ::= \"a\""}}, "guided_grammar"},
  };
  CheckRefused(api, bad);
  auto empty = api.Post("/v1/completions", {{"prompt", "1+1="}, {"guided_choice", {"a", ""}}});
  CHECK(empty->Json()["error"]["message"] ==
        "guided_choice: choice 1 is empty or begins with whitespace");
  auto backref = api.Post("/v1/completions", {{"prompt", "1+1="}, {"guided_regex", "(a)\\1"}});
  CHECK(backref->Json()["error"]["message"] ==
        "guided_regex: at byte 5: backreferences are not supported");
  CHECK(api.backend.submitted.size() == 5);
}

TEST_CASE("tool_choice required or a named function forces one call in the model's format") {
  const json messages = {{{"role", "user"}, {"content", "1+1"}}};
  Api api(kToolTemplate);  // hermes: <tool_call> ... </tool_call>
  json other = kWeather;
  other["function"]["name"] = "get_time";
  other["function"].erase("parameters");
  const json tools = json::array({kWeather, other});
  api.Post("/v1/chat/completions",
           {{"messages", messages}, {"tools", tools}, {"tool_choice", "required"}});
  api.Post("/v1/chat/completions",
           {{"messages", messages},
            {"tools", tools},
            {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}});
  REQUIRE(api.backend.submitted.size() == 2);
  const engine::GenerateRequest& any = api.backend.submitted[0].second;
  CHECK(any.json_prefix == "<tool_call>\n");
  CHECK(any.json_suffix == "\n</tool_call>");
  CHECK(json::parse(any.json_schema)["anyOf"].size() == 2);
  const json named = json::parse(api.backend.submitted[1].second.json_schema);
  CHECK(named["properties"]["name"] == json{{"const", "get_time"}});
  CHECK(named["properties"]["arguments"] == json{{"type", "object"}});
  CHECK(named["required"] == json{"name", "arguments"});
  // The call the constraint allows is the call the gateway parses.
  engine::structured::JsonMatcher m(api.backend.submitted[1].second.grammar);
  const std::string call = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  REQUIRE(m.Advance(call));
  CHECK(m.Terminal());
  const ToolCallReply reply = ParseToolCalls(ToolCallFormat::kHermes, call);
  REQUIRE(reply.calls.size() == 1);
  CHECK(reply.calls[0].name == "get_time");

  for (const json& choice :
       {json({{"type", "function"}, {"function", {{"name", "nope"}}}}), json("sometimes")}) {
    auto refused = api.Post("/v1/chat/completions",
                            {{"messages", messages}, {"tools", tools}, {"tool_choice", choice}});
    INFO(refused->body);
    CHECK(refused->status == 400);
    CHECK(refused->Json()["error"]["param"] == "tool_choice");
  }
  auto no_tools =
      api.Post("/v1/chat/completions", {{"messages", messages}, {"tool_choice", "required"}});
  CHECK(no_tools->Json()["error"]["param"] == "tool_choice");
  CHECK(api.backend.submitted.size() == 2);
}

TEST_CASE("A Mistral model's calls: special tokens kept, ids of nine, forced as the list") {
  Api api(
      "{# [TOOL_CALLS] #}{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
      "{% if tools %}+{{ tools | length }}{% endif %}=");
  const json messages = {{{"role", "user"}, {"content", "1+1"}}};
  auto stream =
      api.Post("/v1/chat/completions",
               {{"messages", messages}, {"tools", json::array({kWeather})}, {"stream", true}});
  REQUIRE(api.backend.submitted.size() == 1);
  CHECK(api.backend.submitted[0].second.keep_special_tokens);  // [TOOL_CALLS] is one
  Write(api, 0,
        {"Sure. [TOOL", "_CALLS][{\"name\": \"get_weather\", ",
         "\"arguments\": {\"city\": \"Paris\"}}]"});
  const auto [content, calls] = Streamed(*stream);
  CHECK(content == "Sure. ");
  REQUIRE(calls.size() == 1);
  CHECK(calls[0]["function"]["name"] == "get_weather");
  CHECK(calls[0]["id"].get<std::string>().size() == 9);  // what Mistral's templates take back
  CHECK(stream->Events().back()["choices"][0]["finish_reason"] == "tool_calls");

  api.Post("/v1/chat/completions", {{"messages", messages}});
  CHECK_FALSE(api.backend.submitted[1].second.keep_special_tokens);
  api.Post("/v1/chat/completions",
           {{"messages", messages}, {"tools", {kWeather}}, {"tool_choice", "required"}});
  const engine::GenerateRequest& forced = api.backend.submitted[2].second;
  CHECK(forced.json_prefix.empty());
  CHECK(json::parse(forced.json_schema)["type"] == "array");
  engine::structured::JsonMatcher m(forced.grammar);
  const std::string call = R"([{"name": "get_weather", "arguments": {"city": "Rome"}}])";
  REQUIRE(m.Advance(call));
  CHECK(m.Terminal());
  CHECK(ParseToolCalls(ToolCallFormat::kMistral, call).calls.size() == 1);
}

TEST_CASE("vLLM's skip_special_tokens reaches the replica; not a boolean, a 400 naming it") {
  Api api;
  api.Post("/v1/completions", {{"prompt", "1+1="}, {"skip_special_tokens", false}});
  api.Post("/v1/completions", {{"prompt", "1+1="}, {"skip_special_tokens", true}});
  REQUIRE(api.backend.submitted.size() == 2);
  CHECK(api.backend.submitted[0].second.keep_special_tokens);
  CHECK_FALSE(api.backend.submitted[1].second.keep_special_tokens);
  auto bad = api.Post("/v1/completions", {{"prompt", "1+1="}, {"skip_special_tokens", "no"}});
  CHECK(bad->status == 400);
  CHECK(bad->Json()["error"]["param"] == "skip_special_tokens");
  CHECK(api.backend.submitted.size() == 2);
}

TEST_CASE("Tools are refused, naming the field, where they cannot be honoured") {
  const json messages = {{{"role", "user"}, {"content", "1+1"}}};
  Api api(kToolTemplate);
  auto with_schema =
      api.Post("/v1/chat/completions", {{"messages", messages},
                                        {"tools", json::array({kWeather})},
                                        {"response_format", {{"type", "json_object"}}}});
  CHECK(with_schema->status == 400);
  CHECK(with_schema->Json()["error"]["param"] == "response_format");
  auto completions = api.Post("/v1/completions", {{"prompt", "1+1="}, {"tools", {kWeather}}});
  CHECK(completions->status == 400);
  CHECK(completions->Json()["error"]["param"] == "tools");
  json bad = kWeather;
  bad["function"]["name"] = "no spaces allowed";
  auto named =
      api.Post("/v1/chat/completions", {{"messages", messages}, {"tools", json::array({bad})}});
  CHECK(named->status == 400);
  CHECK(named->Json()["error"]["message"].get<std::string>().find("tools[0].function.name") !=
        std::string::npos);
  CHECK(api.backend.submitted.empty());

  // A model whose template writes no call format the gateway parses.
  Api plain("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}=");
  auto unparsed = plain.Post("/v1/chat/completions",
                             {{"messages", messages}, {"tools", json::array({kWeather})}});
  CHECK(unparsed->status == 400);
  CHECK(unparsed->Json()["error"]["param"] == "tools");
}

}  // namespace
}  // namespace exa::gateway
