#include "chat_template/chat_template.h"

#include <optional>
#include <string>
#include <utility>

#include "common/status.h"
#include "common/strings.h"

namespace exa::chat_template {
namespace {

using json = nlohmann::ordered_json;

// A special token as tokenizer_config.json writes it: a string, or an AddedToken object whose
// "content" is the string; none when absent.
absl::StatusOr<Value> SpecialToken(const json& config, const char* field) {
  auto it = config.find(field);
  if (it == config.end() || it->is_null()) return Value::Null();
  if (it->is_string()) return Value::String(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return Value::String((*it)["content"].get<std::string>());
  }
  return absl::InvalidArgumentError(StrCat(field, ": expected a string or {\"content\": string}"));
}

// The template sources of a config: a string, or a list of {name, template} whose entry named
// "default" is the template and whose "tool_use", if any, is the one for requests with tools (as
// transformers chooses between them).
struct Sources {
  std::string main;
  std::optional<std::string> tool_use;
};

absl::StatusOr<Sources> TemplateSources(const json& t) {
  if (t.is_string()) return Sources{t.get<std::string>(), std::nullopt};
  if (!t.is_array()) {
    return absl::InvalidArgumentError(
        "chat_template: expected a string or a list of {name, template}");
  }
  std::optional<std::string> main;
  Sources out;
  std::string names;
  for (const json& entry : t) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
        !entry["name"].is_string() || !entry["template"].is_string()) {
      return absl::InvalidArgumentError(
          "chat_template: each entry of the list must be {\"name\": string, \"template\": "
          "string}");
    }
    const auto& name = entry["name"].get_ref<const std::string&>();
    if (name == "default") main = entry["template"].get<std::string>();
    if (name == "tool_use") out.tool_use = entry["template"].get<std::string>();
    StrAppend(&names, names.empty() ? "" : ", ", name);
  }
  if (!main) {
    return absl::InvalidArgumentError(
        StrCat("chat_template: no template named \"default\" (found: ", names, ")"));
  }
  out.main = *std::move(main);
  return out;
}

absl::StatusOr<std::unique_ptr<const Template>> ParseNamed(const std::string& source,
                                                           std::string_view name) {
  auto parsed = Template::Parse(source);
  if (!parsed.ok()) return Annotate(parsed.status(), name);
  return parsed;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::FromTokenizerConfig(
    std::string_view config_json) {
  json config;
  try {
    config = json::parse(config_json);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat("invalid JSON: ", e.what()));
  }
  if (!config.is_object()) return absl::InvalidArgumentError("expected a JSON object");
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::shared_ptr<const ChatTemplate>();
  EXA_ASSIGN_OR_RETURN(Sources sources, TemplateSources(*it));
  auto t = std::shared_ptr<ChatTemplate>(new ChatTemplate());
  EXA_ASSIGN_OR_RETURN(t->template_, ParseNamed(sources.main, "chat_template"));
  t->source_ = std::move(sources.main);
  if (sources.tool_use) {
    EXA_ASSIGN_OR_RETURN(t->tool_template_,
                         ParseNamed(*sources.tool_use, "chat_template \"tool_use\""));
    t->tool_source_ = *std::move(sources.tool_use);
  }
  EXA_ASSIGN_OR_RETURN(t->bos_token_, SpecialToken(config, "bos_token"));
  EXA_ASSIGN_OR_RETURN(t->eos_token_, SpecialToken(config, "eos_token"));
  return std::shared_ptr<const ChatTemplate>(std::move(t));
}

bool ChatTemplate::HasTools(const Value& request) {
  const Value* tools = request.Find("tools");
  return tools != nullptr && !tools->IsNothing();
}

const Template& ChatTemplate::For(bool tools) const {
  return tools && tool_template_ != nullptr ? *tool_template_ : *template_;
}

const std::string& ChatTemplate::source(bool tools) const {
  return tools && tool_template_ != nullptr ? tool_source_ : source_;
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& request,
                                                 const RenderLimits& limits) const {
  if (!request.is_object()) return absl::InvalidArgumentError("expected a JSON object");
  const Value given = Value::FromJson(request);
  Entries variables = given.entries();
  const auto set_default = [&](const char* name, Value v) {
    if (given.Find(name) == nullptr) variables.emplace_back(name, std::move(v));
  };
  set_default("messages", Value::MakeArray({}));
  set_default("tools", Value::Null());
  set_default("add_generation_prompt", Value::Bool(false));
  variables.emplace_back("bos_token", bos_token_);
  variables.emplace_back("eos_token", eos_token_);
  return For(HasTools(given)).Render(variables, limits);
}

}  // namespace exa::chat_template
