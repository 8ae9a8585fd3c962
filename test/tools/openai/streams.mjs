// Streams several completions at once through the official openai client and prints one JSON
// line per request: its text, finish reason, usage and seed, or the error the client raised.
// Usage: node streams.mjs BASE_URL JSON_REQUESTS   (a JSON list of completion requests)
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0, timeout: 60000 });
const requests = JSON.parse(process.argv[3]);

async function run(request, i) {
  const out = { key: `openai-${i}`, text: "", finish_reason: null, usage: null, seed: null, error: null };
  try {
    const stream = await client.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
    for await (const chunk of stream) {
      const choice = chunk.choices?.[0];
      if (choice) {
        out.text += choice.text ?? "";
        if (choice.finish_reason) out.finish_reason = choice.finish_reason;
      }
      if (chunk.usage) out.usage = chunk.usage;
      if (chunk.seed !== undefined) out.seed = chunk.seed;
    }
  } catch (e) {
    out.error = String(e.message ?? e);
  }
  return out;
}

const results = await Promise.all(requests.map(run));
for (const r of results) console.log(JSON.stringify(r));
