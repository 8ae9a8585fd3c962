#include "gateway/tool_calls.h"

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

std::string CallId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(kHex[rng() % 16]);
  return id;
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
  return ToolCallFormat::kNone;
}

ToolCallReply ParseToolCalls(ToolCallFormat format, std::string_view text) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text);
    case ToolCallFormat::kLlama3Json:
      return ParseLlama3Json(text);
    default:
      return {std::string(text), {}};
  }
}

size_t StreamableBytes(ToolCallFormat format, std::string_view text) {
  if (format == ToolCallFormat::kHermes) {
    const size_t open = text.find(kHermesOpen);
    if (open != std::string_view::npos) return open;
    // Hold back an end that may be the start of the marker.
    for (size_t n = std::min(text.size(), kHermesOpen.size() - 1); n > 0; --n) {
      if (kHermesOpen.starts_with(text.substr(text.size() - n))) return text.size() - n;
    }
    return text.size();
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

json ToolCallsJson(const std::vector<ToolCall>& calls, bool streamed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = {{"id", CallId()},
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
  forced.schema = (alternatives.size() == 1 ? alternatives[0]
                   : alternatives.size() <= engine::structured::kMaxAlternatives
                       ? json{{"anyOf", alternatives}}
                       : call(json{{"enum", names}}, json{{"type", "object"}}))
                      .dump();
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
    if (calls == messages[i].end() || calls->is_null()) continue;
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

}  // namespace exa::gateway
