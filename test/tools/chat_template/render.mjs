// The oracle of the chat-template conformance test (test/integration/chat_template_test.sh):
// renders each stdin line {messages, add_generation_prompt, tools, ...} with the chat_template of
// the tokenizer_config.json given, through @huggingface/jinja as transformers.js does, and prints
// the rendering as a JSON string line, or {"error": MESSAGE} when the render throws.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { Template } from "@huggingface/jinja";

// CHAT_TEMPLATE_NOW (Unix seconds) fixes the clock strftime_now reads, as exaserve-cli
// chat-template --now does, so that a template writing today's date renders reproducibly.
if (process.env.CHAT_TEMPLATE_NOW) {
  const fixed = Number(process.env.CHAT_TEMPLATE_NOW) * 1000;
  const RealDate = Date;
  globalThis.Date = class extends RealDate {
    constructor(...args) {
      super(...(args.length ? args : [fixed]));
    }
    static now() {
      return fixed;
    }
  };
}

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
// A list of named templates: "tool_use" renders requests with tools where there is one, else
// "default", as transformers chooses.
const named = (name) =>
  Array.isArray(config.chat_template)
    ? config.chat_template.find((t) => t.name === name)?.template
    : name === "default" ? config.chat_template : undefined;
const plain = new Template(named("default"));
const toolUse = named("tool_use") === undefined ? plain : new Template(named("tool_use"));
// transformers.js passes the special tokens as strings (an AddedToken's content) or null.
const token = (t) => (t === undefined || t === null ? null : typeof t === "string" ? t : t.content);

const out = [];
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (line === "") continue;
  const request = JSON.parse(line);
  const variables = { messages: [], tools: null, add_generation_prompt: false, ...request };
  variables.bos_token = token(config.bos_token);
  variables.eos_token = token(config.eos_token);
  try {
    const template = variables.tools === null || variables.tools === undefined ? plain : toolUse;
    out.push(JSON.stringify(template.render(variables)));
  } catch (e) {
    out.push(JSON.stringify({ error: String(e.message ?? e) }));
  }
}
process.stdout.write(out.map((l) => l + "\n").join(""));
