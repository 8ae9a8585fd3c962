// The official openai client against an ExaServe gateway: completions and chat, streaming and
// not, plus an error the client must surface as an APIError with the status and message.
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

if (failures.length) {
  console.error("FAIL:\n  " + failures.join("\n  "));
  process.exit(1);
}
console.log("openai client: completions, chat, both streamed, errors and models.list all ok");
