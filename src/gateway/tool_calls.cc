#include "gateway/tool_calls.h"

#include <algorithm>
#include <cstdint>
#include <random>

#include "common/strings.h"
#include "engine/structured/json_schema.h"

namespace exa::gateway {
namespace {

using json = nlohmann::json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
// Llama 3's marker of a call, a special token the detokenizer normally drops.
constexpr std::string_view kPythonTag = "<|python_tag|>";
// Mistral's markers, special tokens: before the calls, and between a call's name and arguments
// (and its id) in the later format.
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr size_t kMistralIdLength = 9;
constexpr char kAlnum[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

// One call's JSON object: a string `name` and an object of arguments under `arguments_key` (or
// `alternative_key`), which may also come as JSON text. False when it is not one.
bool ReadCall(const json& j, const char* arguments_key, const char* alternative_key,
              ToolCall* out) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return false;
  }
  auto args = j.find(arguments_key);
  if (args == j.end()) args = j.find(alternative_key);
  json arguments = json::object();
  if (args != j.end() && args->is_string()) {
    arguments = json::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
  } else if (args != j.end()) {
    arguments = *args;
  }
  if (!arguments.is_object()) return false;
  out->name = name->get<std::string>();
  out->arguments = arguments.dump(-1, ' ', false, json::error_handler_t::replace);
  return true;
}

bool ParseCallText(std::string_view text, const char* arguments_key, const char* alternative_key,
                   ToolCall* out) {
  const json j = json::parse(StripWhitespace(text), nullptr, /*allow_exceptions=*/false);
  return !j.is_discarded() && ReadCall(j, arguments_key, alternative_key, out);
}

ToolCallReply ParseHermes(std::string_view text) {
  ToolCallReply reply;
  size_t open = text.find(kHermesOpen);
  if (open == std::string_view::npos) return {std::string(text), {}};
  while (open != std::string_view::npos) {
    const size_t body = open + kHermesOpen.size();
    size_t close = text.find(kHermesClose, body);
    // A reply cut short (max_tokens, a stop string) may leave the last call open.
    const size_t end = close == std::string_view::npos ? text.size() : close;
    ToolCall call;
    if (!ParseCallText(text.substr(body, end - body), "arguments", "parameters", &call)) {
      return {std::string(text), {}};
    }
    reply.calls.push_back(std::move(call));
    if (close == std::string_view::npos) break;
    open = text.find(kHermesOpen, close + kHermesClose.size());
  }
  const std::string_view before = text.substr(0, text.find(kHermesOpen));
  if (!StripWhitespace(before).empty()) reply.content = std::string(before);
  return reply;
}

ToolCallReply ParseLlama3Json(std::string_view text) {
  std::string_view rest = StripWhitespace(text);
  if (rest.starts_with(kPythonTag)) rest = StripWhitespace(rest.substr(kPythonTag.size()));
  if (!rest.starts_with('{')) return {std::string(text), {}};
  ToolCallReply reply;
  ToolCall call;
  if (ParseCallText(rest, "parameters", "arguments", &call)) {
    reply.calls.push_back(std::move(call));
    return reply;
  }
  // Several calls: objects separated by ';' (a ';' inside a string splits wrongly and fails the
  // parse, which leaves the reply as text).
  while (!rest.empty()) {
    const size_t semicolon = rest.find(';');
    if (!ParseCallText(rest.substr(0, semicolon), "parameters", "arguments", &call)) {
      return {std::string(text), {}};
    }
    reply.calls.push_back(std::move(call));
    if (semicolon == std::string_view::npos) break;
    rest = StripWhitespace(rest.substr(semicolon + 1));
  }
  return reply;
}

// Mistral's calls after one [TOOL_CALLS]: a JSON list of call objects (or one object), or
// `name[ARGS]{...}` (`name{...}`, `name[CALL_ID]id[ARGS]{...}`). False when it is neither.
bool ParseMistralCalls(std::string_view body, std::vector<ToolCall>* calls) {
  body = StripWhitespace(body);
  if (body.starts_with('[') || body.starts_with('{')) {
    const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return false;
    if (j.is_object()) {
      ToolCall call;
      if (!ReadCall(j, "arguments", "parameters", &call)) return false;
      calls->push_back(std::move(call));
      return true;
    }
    if (!j.is_array() || j.empty()) return false;
    for (const json& item : j) {
      ToolCall call;
      if (!ReadCall(item, "arguments", "parameters", &call)) return false;
      calls->push_back(std::move(call));
    }
    return true;
  }
  const size_t args = std::min(body.find(kMistralArgs), body.find('{'));
  if (args == std::string_view::npos) return false;
  std::string_view name = body.substr(0, args);
  name = StripWhitespace(name.substr(0, name.find(kMistralCallId)));
  std::string_view arguments = body.substr(args);
  if (arguments.starts_with(kMistralArgs)) arguments.remove_prefix(kMistralArgs.size());
  const json j = json::parse(StripWhitespace(arguments), nullptr, /*allow_exceptions=*/false);
  if (name.empty() || !j.is_object()) return false;
  calls->push_back({std::string(name), j.dump(-1, ' ', false, json::error_handler_t::replace)});
  return true;
}

ToolCallReply ParseMistral(std::string_view text) {
  const size_t marker = text.find(kMistralCalls);
  ToolCallReply reply;
  if (marker == std::string_view::npos) {
    // Without the marker only a reply that is the list alone is calls.
    const std::string_view whole = StripWhitespace(text);
    if (!whole.starts_with('[') || !ParseMistralCalls(whole, &reply.calls)) {
      return {std::string(text), {}};
    }
    return reply;
  }
  for (size_t at = marker; at != std::string_view::npos;) {
    const size_t body = at + kMistralCalls.size();
    const size_t next = text.find(kMistralCalls, body);
    const std::string_view part =
        text.substr(body, next == std::string_view::npos ? std::string_view::npos : next - body);
    if (!StripWhitespace(part).empty() && !ParseMistralCalls(part, &reply.calls)) {
      return {std::string(text), {}};
    }
    at = next;
  }
  if (reply.calls.empty()) return {std::string(text), {}};
  const std::string_view before = text.substr(0, marker);
  if (!StripWhitespace(before).empty()) reply.content = std::string(before);
  return reply;
}

std::string CallId(ToolCallFormat format) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  if (format == ToolCallFormat::kMistral) {
    for (size_t i = 0; i < kMistralIdLength; ++i) id.push_back(kAlnum[rng() % 62]);
    return id;
  }
  id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(kHex[rng() % 16]);
  return id;
}

// `id` as Mistral's templates take it: itself when it is 9 letters and digits, else 9 derived
// from all of it (FNV-1a, so every process derives the same).
std::string MistralId(std::string_view id) {
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (id.size() == kMistralIdLength && std::all_of(id.begin(), id.end(), alnum)) {
    return std::string(id);
  }
  uint64_t h = 14695981039346656037ull;
  for (char c : id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::string out;
  for (size_t i = 0; i < kMistralIdLength; ++i, h /= 62) out.push_back(kAlnum[h % 62]);
  return out;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
    default:
      return "none";
  }
}

ToolCallFormat DetectToolCallFormat(std::string_view source) {
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  // Llama 3.1's template asks for {"name": function name, "parameters": ...} and writes earlier
  // calls the same way.
  if (source.find("<|start_header_id|>") != std::string_view::npos &&
      source.find("\"parameters\"") != std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  if (source.find(kMistralCalls) != std::string_view::npos) return ToolCallFormat::kMistral;
  return ToolCallFormat::kNone;
}

ToolCallReply ParseToolCalls(ToolCallFormat format, std::string_view text) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text);
    case ToolCallFormat::kLlama3Json:
      return ParseLlama3Json(text);
    case ToolCallFormat::kMistral:
      return ParseMistral(text);
    default:
      return {std::string(text), {}};
  }
}

namespace {

// The text before `marker`, less an end that may be the marker's start.
size_t BeforeMarker(std::string_view marker, std::string_view text) {
  const size_t open = text.find(marker);
  if (open != std::string_view::npos) return open;
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (marker.starts_with(text.substr(text.size() - n))) return text.size() - n;
  }
  return text.size();
}

}  // namespace

size_t StreamableBytes(ToolCallFormat format, std::string_view text) {
  if (format == ToolCallFormat::kHermes) return BeforeMarker(kHermesOpen, text);
  if (format == ToolCallFormat::kMistral) {
    // A reply that starts like the list alone waits whole, as the parser reads it.
    const std::string_view start = StripWhitespace(text);
    if (start.empty() || start.front() == '[') return 0;
    return BeforeMarker(kMistralCalls, text);
  }
  if (format == ToolCallFormat::kLlama3Json) {
    // A call is the whole reply: everything waits once it starts like one.
    const std::string_view start = StripWhitespace(text);
    if (start.empty()) return 0;
    // `start` begins with the tag, or is the start of one.
    const bool tag = kPythonTag.starts_with(start.substr(0, kPythonTag.size()));
    if (start.front() == '{' || tag) return 0;
  }
  return text.size();
}

json ToolCallsJson(ToolCallFormat format, const std::vector<ToolCall>& calls, bool streamed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = {{"id", CallId(format)},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (streamed) call["index"] = i;
    out.push_back(std::move(call));
  }
  return out;
}

absl::StatusOr<ForcedCall> ForcedCallSchema(ToolCallFormat format, const json& tools,
                                            std::string_view name) {
  const char* arguments = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  auto call = [&](const json& n, const json& parameters) {
    return json{{"type", "object"},
                {"properties", {{"name", n}, {arguments, parameters}}},
                {"required", {"name", arguments}},
                {"additionalProperties", false}};
  };
  auto parameters_of = [](const json& f) {
    auto p = f.find("parameters");
    return p == f.end() || p->is_null() ? json{{"type", "object"}} : *p;
  };
  json alternatives = json::array();
  json names = json::array();
  for (const json& t : tools) {
    const json& f = t.at("function");
    const std::string n = f.at("name").get<std::string>();
    if (!name.empty() && n != name) continue;
    names.push_back(n);
    alternatives.push_back(call(json{{"const", n}}, parameters_of(f)));
  }
  if (alternatives.empty()) {
    return absl::InvalidArgumentError(
        StrCat("function \"", name, "\" is not one of the request's tools"));
  }
  ForcedCall forced;
  json one = alternatives.size() == 1 ? alternatives[0]
             : alternatives.size() <= engine::structured::kMaxAlternatives
                 ? json{{"anyOf", alternatives}}
                 : call(json{{"enum", names}}, json{{"type", "object"}});
  // Mistral's marker is a special token, outside what a structured output writes: the call is
  // the list alone, which the parser takes as calls.
  if (format == ToolCallFormat::kMistral) {
    one = {{"type", "array"}, {"items", std::move(one)}, {"minItems", 1}, {"maxItems", 1}};
  }
  forced.schema = one.dump();
  if (format == ToolCallFormat::kHermes) {
    forced.prefix = StrCat(kHermesOpen, "\n");
    forced.suffix = StrCat("\n", kHermesClose);
  }
  return forced;
}

absl::Status ValidateTools(const json& tools) {
  auto bad = [](size_t i, std::string_view what) {
    return absl::InvalidArgumentError(StrCat("tools[", i, "]", what));
  };
  if (!tools.is_array()) {
    return absl::InvalidArgumentError(
        "tools: expected a list of {\"type\": \"function\", \"function\": {...}}");
  }
  if (tools.size() > kMaxTools) {
    return absl::InvalidArgumentError(
        StrCat("tools: ", tools.size(), " tools; at most ", kMaxTools));
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    if (!t.is_object() || t.value("type", json()) != "function") {
      return bad(i, ": expected {\"type\": \"function\", \"function\": {...}}");
    }
    auto f = t.find("function");
    if (f == t.end() || !f->is_object()) return bad(i, ".function: expected an object");
    auto name = f->find("name");
    if (name == f->end() || !name->is_string() || !ValidName(name->get<std::string>())) {
      return bad(i, ".function.name: expected 1 to 64 of a-z, A-Z, 0-9, _, - and .");
    }
    auto description = f->find("description");
    if (description != f->end() && !description->is_null() && !description->is_string()) {
      return bad(i, ".function.description: expected a string");
    }
    auto parameters = f->find("parameters");
    if (parameters != f->end() && !parameters->is_null() && !parameters->is_object()) {
      return bad(i, ".function.parameters: expected a JSON Schema object");
    }
  }
  return absl::OkStatus();
}

absl::Status NormalizeToolCallMessages(nlohmann::ordered_json& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    auto calls = messages[i].find("tool_calls");
    if (calls == messages[i].end()) continue;
    // Templates test whether the field is defined, then loop over it: no calls is no field.
    if (calls->is_null() || (calls->is_array() && calls->empty())) {
      messages[i].erase(calls);
      continue;
    }
    const std::string where = StrCat("messages[", i, "].tool_calls");
    if (!calls->is_array()) return absl::InvalidArgumentError(StrCat(where, ": expected a list"));
    for (size_t j = 0; j < calls->size(); ++j) {
      auto& call = (*calls)[j];
      auto f = call.is_object() ? call.find("function") : call.end();
      if (f == call.end() || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) {
        return absl::InvalidArgumentError(
            StrCat(where, "[", j, "]: expected {\"function\": {\"name\", \"arguments\"}}"));
      }
      auto args = f->find("arguments");
      if (args == f->end() || !args->is_string()) continue;
      auto parsed = nlohmann::ordered_json::parse(args->get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) {
        return absl::InvalidArgumentError(
            StrCat(where, "[", j, "].function.arguments: not valid JSON"));
      }
      *args = std::move(parsed);
    }
  }
  return absl::OkStatus();
}

void MistralToolCallIds(nlohmann::ordered_json& messages) {
  for (auto& m : messages) {
    if (!m.is_object()) continue;
    auto result = m.find("tool_call_id");
    if (result != m.end() && result->is_string()) *result = MistralId(result->get<std::string>());
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (auto& call : *calls) {
      auto id = call.is_object() ? call.find("id") : call.end();
      if (id != call.end() && id->is_string()) *id = MistralId(id->get<std::string>());
    }
  }
}

}  // namespace exa::gateway
