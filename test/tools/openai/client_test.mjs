// The official openai client against an ExaServe gateway: completions and chat, streaming and
// not, plus an error the client must surface as an APIError with the status and message; then
// what a vLLM user relies on: logprobs in both shapes (streamed too), n choices, batched prompts,
// models.retrieve, x-request-id, errors naming the field with OpenAI's code, and /tokenize.
// Usage: node client_test.mjs BASE_URL   (e.g. http://127.0.0.1:8080/v1)
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0, timeout: 30000 });
const failures = [];
const check = (cond, what) => { if (!cond) failures.push(what); };

const completion = await client.completions.create({ model: "exa-tiny-arith", prompt: "1+1=", max_tokens: 4 });
check(completion.choices[0].text === "2", `completions text ${JSON.stringify(completion.choices[0])}`);
check(completion.choices[0].finish_reason === "stop", "completions finish_reason");
check(completion.usage.prompt_tokens > 0 && completion.usage.completion_tokens > 0, "completions usage");

let streamed = "";
const cstream = await client.completions.create({ model: "exa-tiny-arith", prompt: "12+30=", max_tokens: 4, stream: true });
for await (const chunk of cstream) streamed += chunk.choices[0]?.text ?? "";
check(streamed === "42", `streamed completion "${streamed}"`);

const chat = await client.chat.completions.create({
  model: "exa-tiny-arith", messages: [{ role: "user", content: "123+456=" }],
});
check(chat.choices[0].message.content === "579", `chat ${JSON.stringify(chat.choices[0])}`);
check(chat.choices[0].message.role === "assistant", "chat role");
check(chat.usage.total_tokens === chat.usage.prompt_tokens + chat.usage.completion_tokens, "chat usage");

let chatStreamed = "";
const sstream = await client.chat.completions.create({
  model: "exa-tiny-arith", messages: [{ role: "user", content: "40+2=" }], stream: true,
});
for await (const chunk of sstream) chatStreamed += chunk.choices[0]?.delta?.content ?? "";
check(chatStreamed === "42", `streamed chat "${chatStreamed}"`);

try {
  await client.completions.create({ model: "exa-tiny-arith", prompt: "1+1=", temperature: -1 });
  failures.push("temperature -1 was accepted");
} catch (e) {
  check(e instanceof OpenAI.APIError && e.status === 400, `error type ${e}`);
  check(String(e.message).includes("temperature"), `error message names the field: ${e.message}`);
}

const models = await client.models.list();
check(models.data.some((m) => m.id === "exa-tiny-arith"), "models.list");

// models.retrieve: by NAME and NAME@VERSION; an unknown id is the client's NotFoundError.
for (const id of ["exa-tiny-arith", "exa-tiny-arith@v1"]) {
  const model = await client.models.retrieve(id);
  check(model.id === "exa-tiny-arith" && model.object === "model", `models.retrieve ${id}: ${JSON.stringify(model)}`);
}
try {
  await client.models.retrieve("no-such-model");
  failures.push("models.retrieve of an unknown model succeeded");
} catch (e) {
  check(e instanceof OpenAI.NotFoundError, `unknown model: ${e}`);
  check(e.code === "model_not_found" && e.param === "model", `unknown model code/param: ${e.code} ${e.param}`);
}

// Legacy logprobs: one entry per generated token, the chosen token among each position's top.
const lp = await client.completions.create({ model: "exa-tiny-arith", prompt: "12+30=", max_tokens: 4, logprobs: 2 });
const legacy = lp.choices[0].logprobs;
check(legacy && legacy.tokens.length === lp.usage.completion_tokens, `legacy logprobs tokens ${JSON.stringify(legacy)}`);
check(legacy.tokens.join("").startsWith(lp.choices[0].text), `legacy tokens spell the text: ${legacy.tokens}`);
check(legacy.token_logprobs.every((x) => x <= 0), "legacy token_logprobs are log-probabilities");
check(legacy.top_logprobs.every((top, i) => legacy.tokens[i] in top && Object.keys(top).length <= 3), "legacy top_logprobs");
check(legacy.text_offset[0] === 0 && legacy.text_offset[1] === legacy.tokens[0].length, `text_offset ${legacy.text_offset}`);

// Chat logprobs, whole and streamed.
const cl = await client.chat.completions.create({
  model: "exa-tiny-arith", messages: [{ role: "user", content: "123+456=" }], logprobs: true, top_logprobs: 2,
});
const content = cl.choices[0].logprobs?.content ?? [];
check(content.length === cl.usage.completion_tokens, `chat logprobs ${JSON.stringify(cl.choices[0])}`);
check(content.map((t) => t.token).join("").startsWith(cl.choices[0].message.content), "chat logprob tokens spell the text");
check(content.every((t) => t.logprob <= 0 && Array.isArray(t.bytes) && t.top_logprobs.length === 2), "chat logprob entries");
check(content.every((t) => t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob), "top_logprobs most likely first");
let streamedLogprobs = 0;
let streamedText = "";
const lstream = await client.chat.completions.create({
  model: "exa-tiny-arith", messages: [{ role: "user", content: "40+2=" }], logprobs: true, stream: true,
});
for await (const chunk of lstream) {
  streamedText += chunk.choices[0]?.delta?.content ?? "";
  streamedLogprobs += chunk.choices[0]?.logprobs?.content?.length ?? 0;
}
check(streamedText === "42" && streamedLogprobs >= 2, `streamed chat logprobs: "${streamedText}" ${streamedLogprobs}`);

// n choices: each indexed, usage summed; sampled with a seed they replay.
const nchat = { model: "exa-tiny-arith", messages: [{ role: "user", content: "7+8=" }], n: 3, temperature: 1, seed: 5 };
const several = await client.chat.completions.create(nchat);
check(several.choices.length === 3 && several.choices.every((c, i) => c.index === i), `n=3 choices ${JSON.stringify(several.choices)}`);
const again = await client.chat.completions.create(nchat);
check(JSON.stringify(again.choices) === JSON.stringify(several.choices), "a seeded n=3 request replays");

// A batch of prompts × n: OpenAI's indexes (prompt i's choices at i*n ...), usage summed.
const batch = await client.completions.create({ model: "exa-tiny-arith", prompt: ["1+1=", "12+30="], n: 2, max_tokens: 4 });
check(batch.choices.map((c) => c.index).join() === "0,1,2,3", `batch indexes ${batch.choices.map((c) => c.index)}`);
check(batch.choices.map((c) => c.text).join() === "2,2,42,42", `batch texts ${batch.choices.map((c) => c.text)}`);
const single = await client.completions.create({ model: "exa-tiny-arith", prompt: "1+1=", max_tokens: 4 });
check(batch.usage.prompt_tokens === single.usage.prompt_tokens + lp.usage.prompt_tokens && batch.usage.completion_tokens === 10,
  `batch usage ${JSON.stringify(batch.usage)} vs ${JSON.stringify(single.usage)}`);
const nstream = await client.completions.create({ model: "exa-tiny-arith", prompt: ["1+1=", "12+30="], stream: true, max_tokens: 4 });
const perIndex = {};
for await (const chunk of nstream) for (const c of chunk.choices) perIndex[c.index] = (perIndex[c.index] ?? "") + c.text;
check(perIndex[0] === "2" && perIndex[1] === "42", `streamed batch ${JSON.stringify(perIndex)}`);

// x-request-id: echoed, and the completion's id.
const traced = await client.completions
  .create({ model: "exa-tiny-arith", prompt: "1+1=", max_tokens: 2 }, { headers: { "x-request-id": "client-trace-1" } })
  .withResponse();
check(traced.response.headers.get("x-request-id") === "client-trace-1", "x-request-id echoed");
check(traced.data.id === "cmpl-client-trace-1", `completion id ${traced.data.id}`);
const untraced = await client.models.list().withResponse();
check(/^[0-9a-f]{16}$/.test(untraced.response.headers.get("x-request-id") ?? ""), "x-request-id generated");

// Errors name the field at fault, with OpenAI's code.
for (const [request, param, code] of [
  [{ prompt: "1+".repeat(200), max_tokens: 2 }, "prompt", "context_length_exceeded"],
  [{ prompt: "1+1=", max_tokens: 255 }, "max_tokens", "context_length_exceeded"],
  [{ prompt: [1, 2, 100000] }, "prompt", null],
  [{ prompt: "1+1=", n: 17 }, "n", null],
  [{ prompt: Array(33).fill("1") }, "prompt", null],
  [{ prompt: "1+1=", logprobs: 21 }, "logprobs", null],
]) {
  try {
    await client.completions.create({ model: "exa-tiny-arith", ...request });
    failures.push(`accepted: ${JSON.stringify(request).slice(0, 80)}`);
  } catch (e) {
    check(e.status === 400 && e.param === param && e.code === code,
      `${JSON.stringify(request).slice(0, 60)}: ${e.status} param ${e.param} code ${e.code}: ${e.message}`);
  }
}
try {
  await client.chat.completions.create({ model: "exa-tiny-arith", messages: [{ role: "user", content: "1" }], logprobs: true, top_logprobs: 21 });
  failures.push("top_logprobs 21 accepted");
} catch (e) {
  check(e.status === 400 && e.param === "top_logprobs", `top_logprobs 21: ${e.status} ${e.param}`);
}

// vLLM's /tokenize and /detokenize, beside /v1.
const root = process.argv[2].replace(/\/v1\/?$/, "");
const post = async (path, body) => (await fetch(root + path, { method: "POST", body: JSON.stringify(body) })).json();
const tokenized = await post("/tokenize", { model: "exa-tiny-arith", prompt: "1+1=" });
check(tokenized.count === single.usage.prompt_tokens && tokenized.tokens.length === tokenized.count, `tokenize ${JSON.stringify(tokenized)}`);
const detokenized = await post("/detokenize", { model: "exa-tiny-arith", tokens: tokenized.tokens.slice(1) });
check(detokenized.prompt === "1+1=", `detokenize ${JSON.stringify(detokenized)}`);

if (failures.length) {
  console.error("FAIL:\n  " + failures.join("\n  "));
  process.exit(1);
}
console.log("openai client: completions, chat, both streamed, errors, models, logprobs, n, batches, x-request-id and /tokenize all ok");
