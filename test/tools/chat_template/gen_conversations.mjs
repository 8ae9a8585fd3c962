// Deterministic conversations for the chat-template conformance test
// (test/integration/chat_template_test.sh): `node gen_conversations.mjs SEED COUNT [--tools]`
// prints COUNT JSON lines {messages, add_generation_prompt, tools?, enable_thinking?}. Most are
// well formed (system / user / assistant turns, empty, multi-line and unicode content, reasoning
// in <think> or reasoning_content); with --tools some carry tool definitions, assistant tool calls
// and tool results; about one in eight is malformed on purpose (roles out of order, content null,
// a number, a list of parts or missing, no messages) so that renders which raise are compared
// too.

const [seedArg, countArg, ...flags] = process.argv.slice(2);
const withTools = flags.includes("--tools");

// mulberry32: a small seeded generator, so every run (and every machine) gets the same corpus.
let state = Number(seedArg ?? 1) >>> 0;
function random() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const chance = (p) => random() < p;
const pick = (list) => list[Math.floor(random() * list.length)];
const between = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));

const FRAGMENTS = [
  "Hello", "What is 2+2?", "Tell me a story about a dragon.", "ok", "Thanks!",
  "", " ", "\n", "  padded on both sides  ", "\n\nleading newlines", "trailing newlines\n\n",
  "line one\nline two\n\nline four", "tab\tseparated\tvalues", "windows\r\nline end",
  "héllo wörld", "日本語のテキストです。", "emoji 😀🚀👍🏽", "مرحبا بالعالم", "Ünïcödé ß",
  "non\u00a0breaking\u00a0space", "\u3000ideographic space\u3000", "zero\u200bwidth",
  "quote \" and backslash \\ and 'single'", "{{ not a tag }}", "{% if x %}not a block{% endif %}",
  "{# not a comment #}", "</think>", "<think>\ninner\n</think>", "<tool_call>", "<|im_end|>",
  "<|eot_id|>", "json {\"a\": [1, 2.5, null]}", "bell \u0007 char", "a very long line " + "x".repeat(300),
  "Σ math: ∫ f(x) dx ≤ ∞", "code:\n```python\nprint('hi')\n```",
];

function text() {
  const parts = [];
  for (let i = between(1, 3); i > 0; --i) parts.push(pick(FRAGMENTS));
  return parts.join(pick([" ", "\n", "", "\n\n"]));
}

function jsonValue(depth) {
  switch (between(0, depth > 1 ? 5 : 7)) {
    case 0: return between(-5, 1000);
    case 1: return pick([0.5, 3.14, -2.25, 1e-7, 123456789.125, 1e21, 2.0]);
    case 2: return chance(0.5);
    case 3: return null;
    case 4: case 5: return text();
    case 6: return [jsonValue(depth + 1), jsonValue(depth + 1)];
    default: {
      const o = {};
      for (let i = between(0, 3); i > 0; --i) o[pick(["city", "unit", "n", "q", "Ünï", "10", "2"])] = jsonValue(depth + 1);
      return o;
    }
  }
}

function tool() {
  const properties = {};
  for (let i = between(0, 3); i > 0; --i) {
    const name = pick(["location", "unit", "count", "query", "verbose", "limit", "ünïcode"]);
    properties[name] = pick([
      { type: "string", description: text() },
      { type: "string", enum: ["celsius", "fahrenheit"] },
      { type: "integer", minimum: 0, maximum: between(1, 100) },
      { type: "number", default: pick([0.5, 1.0, 2.25]) },
      { type: "boolean", default: chance(0.5) },
      { type: "array", items: { type: "string" } },
    ]);
  }
  const fn = { name: pick(["get_weather", "search", "calculator", "lookup_ünï"]), description: text(),
    parameters: { type: "object", properties, required: Object.keys(properties).slice(0, 1) } };
  return chance(0.8) ? { type: "function", function: fn } : fn;
}

function toolCall() {
  const args = {};
  for (let i = between(0, 3); i > 0; --i) args[pick(["location", "unit", "q", "n"])] = jsonValue(1);
  const fn = { name: pick(["get_weather", "search", "calculator"]), arguments: chance(0.3) ? JSON.stringify(args) : args };
  return chance(0.8) ? { id: `call_${between(1, 999)}`, type: "function", function: fn } : fn;
}

function assistantTurn() {
  const m = { role: "assistant", content: text() };
  if (chance(0.25)) m.content = `<think>\n${text()}\n</think>\n\n${text()}`;
  if (chance(0.1)) m.reasoning_content = text();
  return m;
}

function toolExchange(messages) {
  const calls = [];
  for (let i = between(1, 2); i > 0; --i) calls.push(toolCall());
  messages.push({ role: "assistant", content: pick(["", text(), "Let me check."]), tool_calls: calls });
  for (const _ of calls) messages.push({ role: "tool", content: text() });
  if (chance(0.3)) messages.push({ role: "user", content: `<tool_response>\n${text()}\n</tool_response>` });
  messages.push(assistantTurn());
}

function conversation() {
  const messages = [];
  if (chance(0.5)) messages.push({ role: "system", content: text() });
  const turns = between(1, 4);
  for (let i = 0; i < turns; ++i) {
    messages.push({ role: "user", content: text() });
    if (withTools && chance(0.3)) toolExchange(messages);
    else if (i < turns - 1 || chance(0.3)) messages.push(assistantTurn());
  }
  return messages;
}

// Malformed on purpose: templates raise (or not) on these, and both engines must agree.
function breakConversation(messages) {
  const target = messages[between(0, messages.length - 1)];
  switch (between(0, 6)) {
    case 0: messages.splice(between(0, messages.length), 0, { role: "user", content: text() }); break;
    case 1: target.content = null; break;
    case 2: target.content = between(0, 99); break;
    case 3: target.content = [{ type: "text", text: text() }, { type: "text", text: text() }]; break;
    case 4: delete target.content; break;
    case 5: target.role = pick(["developer", "tool", "bogus"]); break;
    default: messages.length = 0;
  }
}

const count = Number(countArg ?? 200);
const out = [];
for (let i = 0; i < count; ++i) {
  const messages = conversation();
  if (chance(0.125)) breakConversation(messages);
  const line = { messages, add_generation_prompt: chance(0.6) };
  if (withTools && chance(0.4)) line.tools = Array.from({ length: between(1, 3) }, tool);
  if (chance(0.3)) line.enable_thinking = chance(0.5);
  out.push(JSON.stringify(line));
}
process.stdout.write(out.join("\n") + "\n");
