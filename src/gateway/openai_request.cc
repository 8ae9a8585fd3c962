#include "gateway/openai_request.h"

#include <cctype>
#include <cstdlib>
#include <utility>

#include "common/strings.h"
#include "engine/structured/json_schema.h"
#include "gateway/tool_calls.h"

namespace exa::gateway {
namespace {

using json = nlohmann::json;

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
    return ApiError{400,
                    lo == INT64_MIN && hi == INT64_MAX
                        ? StrCat(field, ": expected an integer")
                        : StrCat(field, ": expected an integer in [", lo, ", ", hi, "]"),
                    std::string(field)};
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

std::optional<ApiError> ReadBool(const json& body, const char* field, bool* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return ApiError{400, StrCat(field, ": expected true or false"), field};
  *out = it->get<bool>();
  return std::nullopt;
}

// OpenAI fields this server does not implement. Left at their defaults (absent, null, false, 0,
// empty) they are accepted; asked for, they are refused by name rather than silently ignored, so
// a client never takes an answer for something it did not get.
std::optional<ApiError> RefuseUnsupported(const json& body, bool chat) {
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
      {"echo", "not supported"},
      {"suffix", "not supported"},
      {"functions", "not supported: this server does not call functions"},
      {"guided_grammar",
       "not supported; guided_json, guided_choice, guided_regex and response_format are"},
  };
  for (const Field& f : kFields) {
    if (asked(f.name)) return ApiError{400, StrCat(f.name, ": ", f.why, "; omit it"), f.name};
  }
  if (!chat && asked("top_logprobs")) {
    return ApiError{400,
                    "top_logprobs: not a /v1/completions field; use logprobs: N (the N most "
                    "likely tokens per position, 0 to 20)",
                    "top_logprobs"};
  }
  if (auto it = body.find("best_of");
      it != body.end() && it->is_number() && it->get<double>() != 1) {
    return ApiError{400, "best_of: only 1 is supported", "best_of"};
  }
  return std::nullopt;
}

// Whether the output is already held to a schema, choices or a pattern.
bool Constrained(const TextRequest& r) {
  return !r.json_schema.empty() || !r.choices.empty() || r.regex.has_value();
}

constexpr std::string_view kOneConstraint =
    ": give one of response_format, guided_json, guided_choice, guided_regex, structured_outputs";

// A choice list (vLLM's guided_choice) named `field`: strings, checked further when compiled.
std::optional<ApiError> ReadChoices(const json& v, const std::string& field, TextRequest* r) {
  if (Constrained(*r)) return ApiError{400, StrCat(field, kOneConstraint), field};
  if (!v.is_array() || v.empty()) {
    return ApiError{400, StrCat(field, ": expected a non-empty list of strings"), field};
  }
  for (const json& c : v) {
    if (!c.is_string()) {
      return ApiError{400, StrCat(field, ": expected strings, not ", c.dump()), field};
    }
    r->choices.push_back(c.get<std::string>());
  }
  r->json_schema_field = field;
  return std::nullopt;
}

// A regular expression (vLLM's guided_regex) named `field`, checked further when compiled.
std::optional<ApiError> ReadRegex(const json& v, const std::string& field, TextRequest* r) {
  if (Constrained(*r)) return ApiError{400, StrCat(field, kOneConstraint), field};
  if (!v.is_string()) {
    return ApiError{400, StrCat(field, ": expected a regular expression as a string"), field};
  }
  r->regex = v.get<std::string>();
  r->json_schema_field = field;
  return std::nullopt;
}

// vLLM's `structured_outputs` (its newer form of the guided_* fields): {"json": schema},
// {"json_object": true}, {"choice": [...]} or {"regex": "..."}; grammar and structural_tag are
// refused.
std::optional<ApiError> ParseStructuredOutputs(const json& v, TextRequest* r) {
  auto bad = [](std::string message) {
    return ApiError{400, StrCat("structured_outputs", message), "structured_outputs"};
  };
  if (!v.is_object()) return bad(": expected an object such as {\"json\": {...}}");
  if (Constrained(*r)) return bad(std::string(kOneConstraint));
  for (const auto& [key, value] : v.items()) {
    if (value.is_null() || (value.is_boolean() && !value.get<bool>())) continue;
    if (key == "json" && (value.is_object() || value.is_string())) {
      r->json_schema = value.is_string() ? value.get<std::string>() : value.dump();
    } else if (key == "json_object" && value.is_boolean()) {
      r->json_schema = std::string(engine::structured::kJsonObjectSchema);
    } else if (key == "choice") {
      if (auto e = ReadChoices(value, "structured_outputs.choice", r)) return e;
    } else if (key == "regex") {
      if (auto e = ReadRegex(value, "structured_outputs.regex", r)) return e;
    } else if (key == "json" || key == "json_object") {
      return bad(StrCat(
          ".", key,
          key == "json" ? ": expected a JSON Schema (an object or its text)" : ": expected true"));
    } else {
      return bad(StrCat(".", key, ": not supported; json, json_object, choice and regex are"));
    }
    if (r->json_schema_field == "response_format") r->json_schema_field = "structured_outputs";
  }
  return std::nullopt;
}

// Structured outputs (docs/reference/api.md#structured-outputs): OpenAI's `response_format`
// ({"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema", "strict"}}),
// vLLM's `guided_json` (a schema, or its text), `guided_choice`, `guided_regex` and
// `structured_outputs`. The schema or pattern itself is compiled, and refused naming what is
// wrong, by Frontend (gateway/frontend.h).
std::optional<ApiError> ParseResponseFormat(const json& body, TextRequest* r) {
  auto bad = [](std::string message) {
    return ApiError{400, StrCat("response_format: ", message), "response_format"};
  };
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string()) {
      return bad("expected {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
    }
    const std::string type = (*it)["type"].get<std::string>();
    if (type == "json_object") {
      r->json_schema = std::string(engine::structured::kJsonObjectSchema);
    } else if (type == "json_schema") {
      auto spec = it->find("json_schema");
      if (spec == it->end() || !spec->is_object()) {
        return bad("type json_schema needs \"json_schema\": {\"name\": ..., \"schema\": {...}}");
      }
      auto schema = spec->find("schema");
      if (schema == spec->end() || !(schema->is_object() || schema->is_boolean())) {
        return bad("json_schema.schema: expected a JSON Schema object");
      }
      r->json_schema = schema->dump();
    } else if (type != "text") {
      return bad(StrCat("type \"", type, "\" is not one of text, json_object, json_schema"));
    }
  }
  if (auto it = body.find("guided_json"); it != body.end() && !it->is_null()) {
    if (!r->json_schema.empty()) {
      return ApiError{400, "guided_json: give response_format or guided_json, not both",
                      "guided_json"};
    }
    if (!it->is_object() && !it->is_string()) {
      return ApiError{400, "guided_json: expected a JSON Schema (an object or its text)",
                      "guided_json"};
    }
    r->json_schema = it->is_string() ? it->get<std::string>() : it->dump();
    r->json_schema_field = "guided_json";
  }
  if (auto it = body.find("guided_choice"); it != body.end() && !it->is_null()) {
    if (auto e = ReadChoices(*it, "guided_choice", r)) return e;
  }
  if (auto it = body.find("guided_regex"); it != body.end() && !it->is_null()) {
    if (auto e = ReadRegex(*it, "guided_regex", r)) return e;
  }
  if (auto it = body.find("structured_outputs"); it != body.end() && !it->is_null()) {
    if (auto e = ParseStructuredOutputs(*it, r)) return e;
  }
  if (Constrained(*r) && r->tools) {
    return ApiError{400,
                    StrCat(r->json_schema_field,
                           ": cannot be combined with tools: a reply held to a schema has no "
                           "room for a tool call"),
                    r->json_schema_field};
  }
  return std::nullopt;
}

// Who is asking: `cache_salt` (docs/architecture.md#prefix-cache: only requests with the same
// salt share cached prompt prefixes; its length is checked with the other fields in
// Frontend::Validate) and OpenAI's `user`, accepted for compatibility and not used.
std::optional<ApiError> ParseCacheSalt(const json& body, TextRequest* r) {
  auto it = body.find("cache_salt");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) {
    return ApiError{400, "cache_salt: expected a string (at most 256 bytes)", "cache_salt"};
  }
  r->cache_salt = it->get<std::string>();
  return std::nullopt;
}

// The sampling fields: seed, top_k, temperature, top_p, min_p and the penalties.
std::optional<ApiError> ParseSampling(const json& body, TextRequest* r, bool* seeded) {
  std::optional<int64_t> top_k;
  std::optional<double> temperature, top_p, min_p, presence, frequency, repetition;
  // top_k is bounded by the engine's 32-bit field. A seed is any 64-bit pattern.
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) return ApiError{400, "seed: expected an integer", "seed"};
    r->sampling.seed =
        it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
    *seeded = true;
  }
  for (auto e : {ReadInteger(body, "top_k", 0, INT32_MAX, &top_k),
                 ReadNumber(body, "temperature", &temperature), ReadNumber(body, "top_p", &top_p),
                 ReadNumber(body, "min_p", &min_p), ReadNumber(body, "presence_penalty", &presence),
                 ReadNumber(body, "frequency_penalty", &frequency),
                 ReadNumber(body, "repetition_penalty", &repetition)}) {
    if (e) return e;
  }
  if (top_k) r->sampling.top_k = static_cast<int32_t>(*top_k);
  // OpenAI's default temperature is 1; ours stays greedy unless asked, which is what a serving
  // daemon's health probes and tests want (docs/reference/api.md).
  if (temperature) r->sampling.temperature = static_cast<float>(*temperature);
  if (top_p) r->sampling.top_p = static_cast<float>(*top_p);
  if (min_p) r->sampling.min_p = static_cast<float>(*min_p);
  if (repetition) r->sampling.repetition_penalty = static_cast<float>(*repetition);
  if (presence) r->sampling.presence_penalty = static_cast<float>(*presence);
  if (frequency) r->sampling.frequency_penalty = static_cast<float>(*frequency);
  return std::nullopt;
}

// `logprobs` and `top_logprobs` (docs/reference/api.md#log-probabilities): in chat a boolean and
// a count of alternatives; in /v1/completions one count (the legacy shape).
std::optional<ApiError> ParseLogprobs(const json& body, bool chat, OpenAiRequest* out,
                                      engine::SamplingParams* sampling) {
  std::optional<int64_t> top;
  if (chat) {
    bool wanted = false;
    if (auto e = ReadBool(body, "logprobs", &wanted)) return e;
    if (auto e = ReadInteger(body, "top_logprobs", 0, kMaxTopLogprobs, &top)) return e;
    if (top && *top > 0 && !wanted) {
      return ApiError{400, "top_logprobs: needs \"logprobs\": true", "top_logprobs"};
    }
    if (wanted) out->logprobs = LogprobsShape::kChat;
  } else {
    if (auto e = ReadInteger(body, "logprobs", 0, kMaxTopLogprobs, &top)) return e;
    if (top) out->logprobs = LogprobsShape::kLegacy;
  }
  if (out->logprobs == LogprobsShape::kNone) return std::nullopt;
  out->top_logprobs = static_cast<int>(top.value_or(0));
  sampling->logprobs = true;
  sampling->top_logprobs = out->top_logprobs;
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const json& body, TextRequest* r) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  const ApiError bad{400, "stop: expected a string or list of strings", "stop"};
  if (it->is_string()) {
    r->stop.push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array()) return bad;
  for (const auto& s : *it) {
    if (!s.is_string()) return bad;
    r->stop.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// OpenAI's logit_bias: {"token id": bias}, at most 300, each bias in [-100, 100].
std::optional<ApiError> ParseLogitBias(const json& body, TextRequest* r) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) {
    return ApiError{400, "logit_bias: expected an object of token id -> bias", "logit_bias"};
  }
  if (it->size() > engine::kMaxLogitBias) {
    return ApiError{400,
                    StrCat("logit_bias: ", it->size(), " entries; at most ", engine::kMaxLogitBias),
                    "logit_bias"};
  }
  for (const auto& [key, value] : it->items()) {
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    const bool id_ok = !key.empty() && *end == '\0' && id >= 0 && id <= INT32_MAX &&
                       std::isdigit(static_cast<unsigned char>(key[0]));
    if (!id_ok || !value.is_number() || !(value.get<double>() >= -100) ||
        !(value.get<double>() <= 100)) {
      return ApiError{
          400,
          StrCat("logit_bias[\"", key, "\"]: keys are token ids, values numbers in [-100, 100]"),
          "logit_bias"};
    }
    r->sampling.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return std::nullopt;
}

// vLLM's extensions that load generators and agents send: `stop_token_ids` (token ids that end
// a completion, besides the model's end-of-sequence ids), `ignore_eos` (generate max_tokens
// whatever the model says: what benchmarks measure), `min_tokens` (nothing ends the completion
// before it) and `skip_special_tokens` (false: the text keeps special tokens).
std::optional<ApiError> ParseStopTokens(const json& body, TextRequest* r) {
  if (auto e = ReadBool(body, "ignore_eos", &r->ignore_eos)) return e;
  std::optional<int64_t> min_tokens;
  if (auto e = ReadInteger(body, "min_tokens", 0, INT32_MAX, &min_tokens)) return e;
  if (min_tokens) r->min_tokens = static_cast<int32_t>(*min_tokens);
  bool skip_special_tokens = true;
  if (auto e = ReadBool(body, "skip_special_tokens", &skip_special_tokens)) return e;
  r->keep_special_tokens = !skip_special_tokens;
  auto it = body.find("stop_token_ids");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) {
    return ApiError{400, "stop_token_ids: expected a list of token ids", "stop_token_ids"};
  }
  for (size_t i = 0; i < it->size(); ++i) {
    int64_t id = 0;
    if (auto e = CheckInteger((*it)[i], StrCat("stop_token_ids[", i, "]"), 0, INT32_MAX, &id)) {
      e->param = "stop_token_ids";
      return e;
    }
    r->stop_token_ids.push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStreamOptions(const json& body, OpenAiRequest* out) {
  if (auto e = ReadBool(body, "stream", &out->stream)) return e;
  auto it = body.find("stream_options");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) {
    return ApiError{400, "stream_options: expected an object", "stream_options"};
  }
  if (auto usage = it->find("include_usage"); usage != it->end() && !usage->is_null()) {
    if (!usage->is_boolean()) {
      return ApiError{400, "stream_options.include_usage: expected true or false",
                      "stream_options.include_usage"};
    }
    out->include_usage = usage->get<bool>();
  }
  return std::nullopt;
}

// `tools`, `tool_choice` and `parallel_tool_calls` (docs/reference/api.md#tool-calls): the
// tools go to the chat template, and the reply's calls come back as message.tool_calls, unless
// tool_choice is "none". "required" or a named function forces one call (TextRequest::
// forced_tool), held to the tool's parameters like a structured output.
std::optional<ApiError> ParseTools(const json& body, bool chat, TextRequest* r,
                                   OpenAiRequest* out) {
  auto tools = body.find("tools");
  const bool given =
      tools != body.end() && !tools->is_null() && !(tools->is_array() && tools->empty());
  if (given && !chat) {
    return ApiError{400, "tools: only /v1/chat/completions takes tools", "tools"};
  }
  if (given) {
    if (absl::Status s = ValidateTools(*tools); !s.ok()) {
      return ApiError{400, std::string(ToStd(s.message())), "tools"};
    }
  }
  bool active = given;
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
    const json* named = nullptr;
    if (choice->is_object() && choice->value("type", json()) == "function") {
      if (auto f = choice->find("function"); f != choice->end() && f->is_object()) named = &*f;
    }
    if (*choice == "none") {
      active = false;
    } else if (*choice == "required" ||
               (named != nullptr && named->contains("name") && (*named)["name"].is_string())) {
      if (!given) {
        return ApiError{400, "tool_choice: forces a call, but the request has no tools",
                        "tool_choice"};
      }
      r->forced_tool = *choice == "required" ? "" : (*named)["name"].get<std::string>();
    } else if (*choice != "auto") {
      return ApiError{400,
                      "tool_choice: expected \"auto\", \"none\", \"required\" or {\"type\": "
                      "\"function\", \"function\": {\"name\": ...}}",
                      "tool_choice"};
    }
  }
  bool parallel = true;
  if (auto e = ReadBool(body, "parallel_tool_calls", &parallel)) return e;
  r->tools = active;
  out->tools = active;
  out->parallel_tool_calls = parallel;
  return std::nullopt;
}

// The fields /v1/completions and /v1/chat/completions share, into `r` and `out`.
std::optional<ApiError> ParseCommon(const json& body, bool chat, TextRequest* r,
                                    OpenAiRequest* out) {
  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return ApiError{400, "model: expected a string", "model"};
    r->model = it->get<std::string>();
    out->model = r->model;
  }
  // max_completion_tokens is OpenAI's newer name for max_tokens; errors name the one sent. The
  // gateway checks it against gateway.max_tokens_limit (naming the value sent).
  r->max_tokens_field = body.contains("max_completion_tokens") && !body.contains("max_tokens")
                            ? "max_completion_tokens"
                            : "max_tokens";
  std::optional<int64_t> n;
  for (auto e :
       {ReadInteger(body, r->max_tokens_field.c_str(), INT64_MIN, INT64_MAX, &r->max_tokens),
        ReadInteger(body, "n", 1, kMaxN, &n)}) {
    if (e) return e;
  }
  out->n = static_cast<int>(n.value_or(1));
  for (auto e :
       {ParseSampling(body, r, &out->seeded), RefuseUnsupported(body, chat),
        ParseLogprobs(body, chat, out, &r->sampling), ParseStop(body, r), ParseStopTokens(body, r),
        ParseLogitBias(body, r), ParseStreamOptions(body, out), ParseCacheSalt(body, r),
        ParseTools(body, chat, r, out), ParseResponseFormat(body, r)}) {
    if (e) return e;
  }
  return std::nullopt;
}

// One prompt of /v1/completions: a string, or a list of token ids. `where` names it in errors.
std::optional<ApiError> ParseOnePrompt(const json& p, const std::string& where, TextRequest* r) {
  if (p.is_string()) {
    r->prompt = p.get<std::string>();
    return std::nullopt;
  }
  for (size_t i = 0; i < p.size(); ++i) {
    int64_t id = 0;
    // The model's vocabulary is checked later; here only what a token id can be.
    if (auto e = CheckInteger(p[i], StrCat(where, "[", i, "]"), 0, INT32_MAX, &id)) {
      e->message = StrCat(e->message, " (token ids)");
      e->param = "prompt";
      return e;
    }
    r->prompt_tokens.push_back(static_cast<int32_t>(id));
  }
  if (r->prompt_tokens.empty()) return ApiError{400, StrCat(where, ": no token ids"), "prompt"};
  return std::nullopt;
}

// `prompt` of /v1/completions: a string, a list of token ids, or a batch (a list of strings or
// of token-id lists, at most kMaxPrompts) — one TextRequest each, copies of `common`.
std::optional<ApiError> ParseCompletionPrompts(const json& body, const TextRequest& common,
                                               std::vector<TextRequest>* prompts) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return ApiError{400, "prompt: required", "prompt"};
  const ApiError shape{400,
                       "prompt: expected a string, a list of token ids, or a list of strings or of "
                       "token-id lists",
                       "prompt"};
  const bool batch =
      it->is_array() && !it->empty() && ((*it)[0].is_string() || (*it)[0].is_array());
  if (!it->is_string() && !it->is_array()) return shape;
  if (it->is_array() && it->empty()) return ApiError{400, "prompt: an empty list", "prompt"};
  if (batch && it->size() > static_cast<size_t>(kMaxPrompts)) {
    return ApiError{
        400, StrCat("prompt: ", it->size(), " prompts; at most ", kMaxPrompts, " in one request"),
        "prompt"};
  }
  const size_t count = batch ? it->size() : 1;
  for (size_t i = 0; i < count; ++i) {
    const json& p = batch ? (*it)[i] : *it;
    if (batch && !p.is_string() && !(p.is_array() && (p.empty() || p[0].is_number()))) {
      return shape;
    }
    TextRequest r = common;
    if (auto e = ParseOnePrompt(p, batch ? StrCat("prompt[", i, "]") : "prompt", &r)) return e;
    prompts->push_back(std::move(r));
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
  if (absl::Status s = NormalizeToolCallMessages(messages); !s.ok()) {
    return ApiError{400, std::string(ToStd(s.message())), "messages"};
  }
  chat["messages"] = std::move(messages);
  if (r->tools) chat["tools"] = body["tools"];
  r->chat = std::move(chat);
  return std::nullopt;
}

// One message's text: its content string, or its text parts joined.
std::optional<ApiError> MessageText(const json& m, const std::string& where, std::string* text) {
  auto content = m.find("content");
  if (content != m.end() && content->is_string()) {
    *text = content->get<std::string>();
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
      *text += part_text->get<std::string>();
    }
  } else if (content == m.end() || !content->is_null()) {
    return ApiError{400, StrCat(where, ".content: expected a string"), "messages"};
  }
  return std::nullopt;
}

}  // namespace

std::string SafeDump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<ApiError> ParseChatMessages(const json& body, const std::string& raw_body,
                                          TextRequest* r) {
  r->prompt_field = "messages";
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
    std::string text;
    if (auto e = MessageText(m, where, &text)) return e;
    if (!prompt.empty() && !text.empty()) prompt += "\n";
    prompt += text;
  }
  if (prompt.empty()) {
    return ApiError{400, "messages: every message's content is empty", "messages"};
  }
  r->prompt = std::move(prompt);
  return ParseChatVariables(raw_body, r);
}

std::optional<ApiError> ParseOpenAiRequest(const std::string& raw_body, bool chat,
                                           OpenAiRequest* out) {
  json body;
  try {
    body = json::parse(raw_body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    return ApiError{400, StrCat("request body: invalid JSON: ", e.what()), ""};
  }
  if (!body.is_object()) return ApiError{400, "request body: expected a JSON object", ""};
  out->chat = chat;
  TextRequest common;
  if (auto e = ParseCommon(body, chat, &common, out)) return e;
  if (chat) {
    if (auto e = ParseChatMessages(body, raw_body, &common)) return e;
    out->prompts.push_back(std::move(common));
  } else if (auto e = ParseCompletionPrompts(body, common, &out->prompts)) {
    return e;
  }
  const size_t choices = out->prompts.size() * static_cast<size_t>(out->n);
  if (choices > static_cast<size_t>(kMaxChoices)) {
    return ApiError{
        400,
        StrCat(out->n > 1 ? "n" : "prompt", ": ", out->prompts.size(), " prompts × n ", out->n,
               " = ", choices, " choices; at most ", kMaxChoices, " in one request"),
        out->n > 1 ? "n" : "prompt"};
  }
  return std::nullopt;
}

std::vector<TextRequest> ChoiceRequests(const OpenAiRequest& request, uint64_t seed) {
  std::vector<TextRequest> out;
  out.reserve(request.prompts.size() * static_cast<size_t>(request.n));
  for (const TextRequest& prompt : request.prompts) {
    for (int j = 0; j < request.n; ++j) {
      TextRequest& r = out.emplace_back(prompt);
      r.sampling.seed = seed + static_cast<uint64_t>(j);
    }
  }
  return out;
}

}  // namespace exa::gateway
