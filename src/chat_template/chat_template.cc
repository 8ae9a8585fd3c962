#include "chat_template/chat_template.h"

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

// The template's source: a string, or the entry named "default" of a list of {name, template}.
absl::StatusOr<std::string> TemplateSource(const json& t) {
  if (t.is_string()) return t.get<std::string>();
  if (!t.is_array()) {
    return absl::InvalidArgumentError(
        "chat_template: expected a string or a list of {name, template}");
  }
  std::string names;
  for (const json& entry : t) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
        !entry["name"].is_string() || !entry["template"].is_string()) {
      return absl::InvalidArgumentError(
          "chat_template: each entry of the list must be {\"name\": string, \"template\": "
          "string}");
    }
    if (entry["name"] == "default") return entry["template"].get<std::string>();
    StrAppend(&names, names.empty() ? "" : ", ", entry["name"].get<std::string>());
  }
  return absl::InvalidArgumentError(
      StrCat("chat_template: no template named \"default\" (found: ", names, ")"));
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
  EXA_ASSIGN_OR_RETURN(std::string source, TemplateSource(*it));
  auto parsed = Template::Parse(source);
  if (!parsed.ok()) return Annotate(parsed.status(), "chat_template");
  auto t = std::shared_ptr<ChatTemplate>(new ChatTemplate());
  t->template_ = *std::move(parsed);
  t->source_ = std::move(source);
  EXA_ASSIGN_OR_RETURN(t->bos_token_, SpecialToken(config, "bos_token"));
  EXA_ASSIGN_OR_RETURN(t->eos_token_, SpecialToken(config, "eos_token"));
  return std::shared_ptr<const ChatTemplate>(std::move(t));
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
  return template_->Render(variables, limits);
}

}  // namespace exa::chat_template
