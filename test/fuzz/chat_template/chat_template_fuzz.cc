// libFuzzer entry for chat templates (docs/testing.md): any byte string either fails to parse
// with a Status or parses into a template whose render, on a conversation with tools, returns a
// rendering or a Status within small bounds, never crashing or running away. Built with clang
// -fsanitize=fuzzer it fuzzes; in ctest its seed corpus and deterministic mutations of it run
// through corpus_runner.cc.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat_template/chat_template.h"

namespace {

const exa::chat_template::Entries& Variables() {
  static const exa::chat_template::Entries* variables = [] {
    auto json = nlohmann::ordered_json::parse(R"({
      "messages": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "héllo\n world "},
                   {"role": "assistant", "content": "<think>\nhm\n</think>\n\nhi",
                    "tool_calls": [{"type": "function", "function": {"name": "f",
                                    "arguments": {"a": [1, 2.5, null]}}}]},
                   {"role": "tool", "content": "42"},
                   {"role": "user", "content": ""}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
      "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
    auto value = exa::chat_template::Value::FromJson(json);
    return new exa::chat_template::Entries(value.entries());
  }();
  return *variables;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = exa::chat_template::Template::Parse(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!parsed.ok()) return 0;
  exa::chat_template::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_loop_iterations = 10000;
  limits.max_call_depth = 16;
  (void)(*parsed)->Render(Variables(), limits);
  return 0;
}
