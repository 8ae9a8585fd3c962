// The chat-template engine, construct by construct: statements, whitespace control, filters,
// tests, methods, operators, errors with their line, render bounds, and templates refused at
// parse time. Byte-exactness against @huggingface/jinja on real templates is
// test/integration/chat_template_test.sh.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <ctime>
#include <sstream>
#include <string>

#include "chat_template/chat_template.h"
#include "chat_template/render_lines.h"
#include "chat_template/value.h"

namespace exa::chat_template {
namespace {

using json = nlohmann::ordered_json;

// Renders `source` with `variables` (a JSON object); the error message when it fails.
std::string Render(const std::string& source, const std::string& variables = "{}",
                   const RenderLimits& limits = {}) {
  auto t = Template::Parse(source);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  Value vars = Value::FromJson(json::parse(variables));
  auto out = (*t)->Render(vars.entries(), limits);
  if (!out.ok()) return "ERROR: " + std::string(out.status().message());
  return *out;
}

std::string ParseError(const std::string& source) {
  auto t = Template::Parse(source);
  return t.ok() ? "" : std::string(t.status().message());
}

TEST_CASE("if, elif and else pick the first true branch") {
  const std::string t = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}";
  CHECK(Render(t, R"({"x": 1})") == "one");
  CHECK(Render(t, R"({"x": 2})") == "two");
  CHECK(Render(t, R"({"x": 3})") == "many");
}

TEST_CASE("for exposes loop.index, index0, first, last and length") {
  CHECK(Render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.length }}"
               "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %},{% endfor %}",
               R"({"xs": ["a", "b", "c"]})") == "103F,213,323L,");
}

TEST_CASE("for filters with if, unpacks pairs, loops over keys, and renders else when empty") {
  CHECK(Render("{% for x in xs if x > 1 %}{{ x }}{% endfor %}", R"({"xs": [1, 2, 3]})") == "23");
  CHECK(Render("{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %}",
               R"({"m": {"b": 1, "a": 2}})") == "b=1;a=2;");
  CHECK(Render("{% for k in m %}{{ k }}{% endfor %}", R"({"m": {"b": 1, "a": 2}})") == "ba");
  CHECK(Render("{% for x in xs %}{{ x }}{% else %}none{% endfor %}", R"({"xs": []})") == "none");
  CHECK(Render("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}"
               "{% break %}{% endif %}{{ x }}{% endfor %}",
               R"({"xs": [1, 2, 3, 4, 5]})") == "13");
}

TEST_CASE("set inside a loop stays in the loop; a namespace carries values out") {
  CHECK(Render("{% set n = 0 %}{% for x in xs %}{% set n = n + x %}{% endfor %}{{ n }}",
               R"({"xs": [1, 2]})") == "0");
  CHECK(Render("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}"
               "{% endfor %}{{ ns.n }}",
               R"({"xs": [1, 2]})") == "3");
  CHECK(Render("{% set a, b = [1, 2] %}{{ b }}{{ a }}") == "21");
  CHECK(Render("{% set block %}x{{ 1 + 1 }}{% endset %}[{{ block }}]") == "[x2]");
}

TEST_CASE("macros take positional, keyword and default arguments") {
  const std::string m =
      "{% macro greet(name, greeting='Hi', end='!') %}{{ greeting }} "
      "{{ name }}{{ end }}{% endmacro %}";
  CHECK(Render(m + "{{ greet('Ann') }}|{{ greet('Bo', 'Yo') }}|{{ greet('Cy', end='?') }}") ==
        "Hi Ann!|Yo Bo!|Hi Cy?");
  CHECK(Render(m + "{{ greet('Ann', bogus=1) }}").find("no keyword argument 'bogus'") !=
        std::string::npos);
}

TEST_CASE("whitespace control strips on the side of the dash") {
  CHECK(Render("a  {{- 'b' -}}  c") == "abc");
  CHECK(Render("a  {%- if true -%}  b  {%- endif -%}  c") == "abc");
  CHECK(Render("a  {#- note -#}  b") == "ab");
  CHECK(Render("a {# note #} b") == "a  b");
}

TEST_CASE("trim_blocks and lstrip_blocks apply to block tags, as transformers sets them") {
  // The newline after a block tag goes, and so do spaces before a block tag on its line.
  CHECK(Render("{% if true %}\n  x\n    {% endif %}\ny") == "  x\ny");
  // Expression tags keep their surroundings; the template's one trailing newline goes.
  CHECK(Render("  {{ 'x' }}\n\n") == "  x\n");
  CHECK(Render("{# c #}\nz") == "z");
}

TEST_CASE("values print as JavaScript prints them") {
  CHECK(Render("{{ 1 }} {{ 1.5 }} {{ 2.0 }} {{ true }} {{ none }}|{{ undefined_var }}|") ==
        "1 1.5 2.0 true |"
        "|");
  CHECK(Render("{{ [1, 'a', none] }} {{ {'k': [true]} }}") == "[1, \"a\", null] {\"k\": [true]}");
  CHECK(JsNumber(1e21) == "1e+21");
  CHECK(JsNumber(1e-7) == "1e-7");
  CHECK(JsNumber(123456789.125) == "123456789.125");
  CHECK(JsNumber(0.000001) == "0.000001");
  CHECK(JsNumber(-2.5) == "-2.5");
}

TEST_CASE("filters") {
  CHECK(Render("[{{ '  a b \n' | trim }}]") == "[a b]");
  CHECK(Render("{{ x | tojson }}", R"({"x": {"b": [1, 2.5], "a": "é\n"}})") ==
        "{\"b\": [1, 2.5], \"a\": \"é\\n\"}");
  CHECK(Render("{{ x | tojson(indent=2) }}", R"({"x": {"a": [1], "b": {}}})") ==
        "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
  CHECK(Render("{{ 'abc' | length }} {{ [1, 2] | length }} {{ {'a': 1} | length }}") == "3 2 1");
  CHECK(Render("{{ 'aBc' | upper }} {{ 'ÀB' | lower }} {{ 'straße' | upper }}") ==
        "ABC àb STRASSE");
  CHECK(Render("{{ ['a', 'b'] | join(', ') }} {{ [1, 2] | join }}") == "a, b 12");
  CHECK(
      Render(
          "{{ missing | default('d') }} {{ '' | default('e', true) }} {{ 'x' | default('f') }}") ==
      "d e x");
  CHECK(Render("{% for k, v in {'a': 1} | items %}{{ k }}{{ v }}{% endfor %}") == "a1");
  CHECK(Render("{{ 3 | string }}{{ [1] | string }} {{ [1, 2] | first }}{{ [1, 2] | last }}") ==
        "3[1] 12");
  CHECK(Render("{{ 'hello world' | capitalize }} {{ 'a-b' | replace('-', '+') }}") ==
        "Hello world a+b");
  CHECK(Render("{{ xs | selectattr('on') | map(attribute='n') | join }}"
               "{{ xs | rejectattr('on') | map(attribute='n') | join }}",
               R"({"xs": [{"n": 1, "on": true}, {"n": 2, "on": false}, {"n": 3}]})") == "123");
  CHECK(Render("{{ xs | selectattr('r', 'equalto', 'u') | length }}",
               R"({"xs": [{"r": "u"}, {"r": "a"}]})") == "1");
}

TEST_CASE("tests") {
  CHECK(Render("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}",
               R"({"x": 0})") == "truetruetruetrue");
  CHECK(Render("{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 1.5 is number }}") ==
        "truetruetruetrue");
  CHECK(Render("{{ true is true }}{{ false is false }}{{ 1 is true }}{{ x is not none }}",
               R"({"x": 1})") == "truetruefalsetrue");
  CHECK(Render("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 'z' not in 'abc' }}") ==
        "truetruetruetrue");
}

TEST_CASE("string methods, mapping methods, indexing and slicing") {
  CHECK(Render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}") == "truetrue");
  CHECK(
      Render(
          "{{ 'a</t>b'.split('</t>')[-1] }}{{ ' x '.strip() }}{{ ' x'.lstrip() }}"
          "{{ 'x '.rstrip() }}{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}{{ 'aa'.replace('a', 'b') }}") ==
      "bxxxABabbb");
  CHECK(Render("{{ ' a  b '.split() | join('|') }}") == "a|b");
  CHECK(Render("{{ m.get('a') }}{{ m.get('z', 'd') }}{{ m.get('z') is none }}"
               "{{ m.keys() | join }}{{ m.items() | length }}",
               R"({"m": {"a": 1, "b": 2}})") == "1dtrueab2");
  CHECK(Render("{{ xs[::-1] | join }}{{ xs[-1] }}{{ xs[1:] | join }}{{ 'héllo'[::-1] }}",
               R"({"xs": [1, 2, 3]})") == "321323olléh");
  CHECK(Render("{{ 'a' ~ 1 ~ none_var }}{{ 'a' + 'b' }}{{ 1 + 2 * 3 }}{{ 7 // 2 }}{{ 7 / 2 }}") ==
        "a1ab733.5");
}

TEST_CASE("strftime_now is a defined global that formats the clock as Python's strftime") {
  // Llama 3.2's template asks `strftime_now is defined` before it writes today's date; without
  // it the date falls back to the template's own "26 Jul 2024".
  const std::string llama =
      "{% if strftime_now is defined %}{{ strftime_now('%d %b %Y') }}"
      "{% else %}26 Jul 2024{% endif %}";
  RenderLimits fixed;
  fixed.fixed_time = 1764892800;  // 2025-12-05 00:00:00 UTC
  setenv("TZ", "UTC", 1);
  tzset();
  CHECK(Render(llama, "{}", fixed) == "05 Dec 2025");
  CHECK(Render("{{ strftime_now('%Y-%m-%d %H:%M, %A %B %j, 100%%') }}", "{}", fixed) ==
        "2025-12-05 00:00, Friday December 339, 100%");
  CHECK(Render("{{ range is defined }}{{ namespace is defined }}{{ nothing is defined }}") ==
        "truetruefalse");
  // A variable of the same name wins over the global.
  CHECK(Render("{{ strftime_now }}", R"({"strftime_now": "mine"})") == "mine");
  CHECK(Render("{{ strftime_now('') }}|", "{}", fixed) == "|");
  CHECK(Render("{{ strftime_now(3) }}") == "ERROR: line 1: strftime_now() takes a format string");
  CHECK(Render("{{ strftime_now('" + std::string(300, 'x') + "') }}")
            .find("the format must be at most 256 bytes") != std::string::npos);
  // Without a fixed clock it reads the system's: this year, four digits.
  CHECK(Render("{{ strftime_now('%Y') | length }}") == "4");
}

TEST_CASE("raise_exception fails the render with the template's message and line") {
  CHECK(Render("line one\n{{ raise_exception('roles must alternate') }}") ==
        "ERROR: line 2: raise_exception: roles must alternate");
}

TEST_CASE("runtime errors name the line") {
  CHECK(Render("a\nb\n{{ 'x' + none }}") == "ERROR: line 3: operator + on none");
  CHECK(Render("\n{{ 5 | trim }}") == "ERROR: line 2: filter trim cannot be applied to an integer");
  CHECK(Render("{% for x in 'abc' %}{% endfor %}") ==
        "ERROR: line 1: for: cannot loop over a string");
}

TEST_CASE("renders are bounded: output bytes, loop iterations, macro depth") {
  RenderLimits limits;
  limits.max_output_bytes = 100;
  CHECK(Render("{% for i in range(200) %}x{% endfor %}", "{}", limits) ==
        "ERROR: line 1: the rendering is larger than 100 bytes");
  CHECK(Render("{% set s = 'xxxxxxxxxx' %}{% for i in range(10) %}{% set s = s ~ s %}"
               "{% endfor %}",
               "{}", limits)
            .find("larger than 100 bytes") != std::string::npos);
  limits = {};
  limits.max_loop_iterations = 50;
  CHECK(Render("{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}", "{}",
               limits)
            .find("more than 50 loop iterations") != std::string::npos);
  limits = {};
  CHECK(Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", limits)
            .find("macro calls nested deeper than 64") != std::string::npos);
}

TEST_CASE("unsupported constructs fail at parse time with the line and the construct") {
  CHECK(ParseError("ok\n{% call foo() %}x{% endcall %}") ==
        "line 2: {% call %} is not supported: chat templates may use if/elif/else, for, set, "
        "macro, break and continue (docs/reference/api.md#chat-templates)");
  CHECK(ParseError("{% include 'other.jinja' %}").find("{% include %} is not supported") !=
        std::string::npos);
  CHECK(ParseError("{% filter upper %}x{% endfilter %}").find("{% filter %} is not supported") !=
        std::string::npos);
  CHECK(ParseError("\n\n{{ x | wordcount }}").find("line 3: unknown filter 'wordcount'") == 0);
  CHECK(ParseError("{{ x is divisibleby }}").find("line 1: unknown test 'divisibleby'") == 0);
  CHECK(ParseError("{{ x.zfill(3) }}").find("line 1: unknown method .zfill()") == 0);
  CHECK(ParseError("{{ cycler(1) }}").find("line 1: unknown function cycler()") == 0);
  CHECK(ParseError("{% macro m() %}{{ varargs }}{% endmacro %}").find("varargs") !=
        std::string::npos);
  CHECK(ParseError("{% if x %}never closed").find("line 1: {% if %} is never closed") == 0);
  CHECK(ParseError("{{ 'unterminated }}").find("not closed") != std::string::npos);
  CHECK(ParseError("{% macro m() %}{% endmacro %}{{ m() }}").empty());
}

TEST_CASE("a tokenizer_config.json template comes with its special tokens") {
  auto t = ChatTemplate::FromTokenizerConfig(
      R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
          "chat_template": [{"name": "tool_use", "template": "no"},
                            {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}>{% endif %}{{ tools is none }}{{ eos_token }}"}]})");
  REQUIRE(t.ok());
  REQUIRE(*t != nullptr);
  auto out = (*t)->Render(json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
                                          "add_generation_prompt": true})"));
  REQUIRE(out.ok());
  CHECK(*out == "<s>hi>true</s>");
  // Tools select the list's "tool_use" template, as transformers does; null tools do not.
  auto with_tools = (*t)->Render(json::parse(R"({"messages": [], "tools": []})"));
  REQUIRE(with_tools.ok());
  CHECK(*with_tools == "no");
  auto null_tools = (*t)->Render(json::parse(R"({"messages": [], "tools": null})"));
  REQUIRE(null_tools.ok());
  CHECK(*null_tools == "<s>true</s>");
  CHECK((*t)->source(/*tools=*/true) == "no");
  CHECK((*t)->source().find("bos_token") != std::string::npos);
  auto bad_tool_use = ChatTemplate::FromTokenizerConfig(
      R"({"chat_template": [{"name": "default", "template": "x"},
                            {"name": "tool_use", "template": "{% if %}"}]})");
  CHECK(std::string(bad_tool_use.status().message()).find("chat_template \"tool_use\": line 1") ==
        0);
  auto plain = ChatTemplate::FromTokenizerConfig(R"({"chat_template": "{{ tools | length }}"})");
  REQUIRE(plain.ok());
  CHECK((*plain)->source(/*tools=*/true) == "{{ tools | length }}");
  auto none = ChatTemplate::FromTokenizerConfig(R"({"bos_token": "<s>"})");
  REQUIRE(none.ok());
  CHECK(*none == nullptr);
  auto bad = ChatTemplate::FromTokenizerConfig(R"({"chat_template": "ok\n{{ x | nope }}"})");
  CHECK(std::string(bad.status().message()) ==
        "chat_template: line 2: unknown filter 'nope' (supported: abs, capitalize, default, "
        "first, float, indent, int, items, join, last, length, list, lower, map, rejectattr, "
        "replace, reverse, safe, selectattr, sort, string, title, tojson, trim, unique, upper)");
  auto unnamed =
      ChatTemplate::FromTokenizerConfig(R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  CHECK(std::string(unnamed.status().message()).find("no template named \"default\"") !=
        std::string::npos);
}

TEST_CASE(
    "RenderLines prints a JSON string per line, an error object for a failing one, and goes on") {
  auto t = ChatTemplate::FromTokenizerConfig(
      R"({"chat_template": "{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('bad role') }}{% endif %}{{ m.content }}\n{% endfor %}"})");
  REQUIRE(t.ok());
  std::istringstream in(
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\\"b\"}]}\n\n"
      "{\"messages\": [{\"role\": \"bad\"}]}\nnot json\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"é\"}]}\n");
  std::ostringstream out;
  CHECK(RenderLines(**t, in, out) == 2);
  CHECK(out.str() ==
        "\"a\\\"b\\n\"\n"
        "{\"error\":\"line 1: raise_exception: bad role\"}\n"
        "{\"error\":\"the line is not valid JSON\"}\n"
        "\"é\\n\"\n");
}

}  // namespace
}  // namespace exa::chat_template
