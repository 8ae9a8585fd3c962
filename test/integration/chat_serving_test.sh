#!/usr/bin/env bash
# A chat request on a model whose tokenizer_config.json has a chat_template is served with the
# template's rendering as its prompt (docs/reference/api.md#chat-templates): the bundled model
# with a template that writes "<s>" + the contents + "=" answers the chat exactly as the
# completion of that text, with the same prompt tokens (the template's <s> is the BOS, not a
# second one); add_generation_prompt and chat_template_kwargs reach the template; its
# raise_exception is a 400 naming messages; a gateway-only node renders with the template the
# inference node describes; a template the engine cannot render fails the load.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill -9 ${pid:-} ${bad_pid:-} 2>/dev/null || true; kill_nodes; rm -rf "$work"' EXIT
bundled=$(cd "$(dirname "$0")/../../models/exa-tiny-arith" && pwd)

# with_template DIR TEMPLATE: the bundled model in DIR/exa-tiny-arith with TEMPLATE as its
# chat_template.
with_template() {
  mkdir -p "$1"
  cp -r "$bundled" "$1/exa-tiny-arith"
  python3 - "$1/exa-tiny-arith/tokenizer_config.json" "$2" <<'PY'
import json, sys
path, template = sys.argv[1], sys.argv[2]
config = json.load(open(path))
config["chat_template"] = template
json.dump(config, open(path, "w"), indent=2)
PY
}
with_template "$work/good" "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}\
{{ raise_exception('This model takes no system message') }}{% endif %}{{ m.content }}{% endfor %}\
{% if add_generation_prompt %}={% endif %}{% if shout is defined and shout %}!{% endif %}"

EXASERVE_INFERENCE_MODELS="$work/good/exa-tiny-arith" start_daemon

post() { curl -s -o "$work/body" -w '%{http_code}' "$http$1" -H 'Content-Type: application/json' -d "$2"; }
field() { python3 -c "import json,sys; d=json.load(open('$work/body')); print(eval(sys.argv[1]))" "$1"; }

[ "$(post /v1/completions '{"prompt":"12+30=","max_tokens":4,"temperature":0}')" = 200 ] ||
  fail "completions: $(cat "$work/body")"
want_text=$(field 'd["choices"][0]["text"]')
want_tokens=$(field 'd["usage"]["prompt_tokens"]')
[ "$want_text" = 42 ] || fail "12+30= answered $(cat "$work/body")"

# Without the template the prompt would be "12+30" (the fallback joins contents): no "=".
[ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"12+30"}],"max_tokens":4,"temperature":0}')" = 200 ] ||
  fail "chat: $(cat "$work/body")"
[ "$(field 'd["choices"][0]["message"]["content"]')" = "$want_text" ] ||
  fail "chat answered $(cat "$work/body"), the completion of the rendering answered $want_text"
[ "$(field 'd["usage"]["prompt_tokens"]')" = "$want_tokens" ] ||
  fail "chat prompt_tokens $(field 'd["usage"]["prompt_tokens"]'), the rendering's $want_tokens"

# add_generation_prompt false drops the "=", chat_template_kwargs add the "!": one token each.
[ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"12+30"}],"max_tokens":1,"add_generation_prompt":false}')" = 200 ] ||
  fail "add_generation_prompt false: $(cat "$work/body")"
[ "$(field 'd["usage"]["prompt_tokens"]')" = "$((want_tokens - 1))" ] ||
  fail "add_generation_prompt false: prompt_tokens $(field 'd["usage"]["prompt_tokens"]')"
[ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"12+30"}],"max_tokens":1,"chat_template_kwargs":{"shout":true}}')" = 200 ] ||
  fail "chat_template_kwargs: $(cat "$work/body")"
[ "$(field 'd["usage"]["prompt_tokens"]')" = "$((want_tokens + 1))" ] ||
  fail "chat_template_kwargs: prompt_tokens $(field 'd["usage"]["prompt_tokens"]')"

# The template's raise_exception: 400 on messages, with its message.
[ "$(post /v1/chat/completions '{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"1+1"}]}')" = 400 ] ||
  fail "raise_exception: $(cat "$work/body")"
[ "$(field 'd["error"]["param"]')" = messages ] || fail "raise_exception param: $(cat "$work/body")"
grep -q "This model takes no system message" "$work/body" || fail "raise_exception message: $(cat "$work/body")"
[ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"1+1"}],"chat_template_kwargs":[1]}')" = 400 ] ||
  fail "chat_template_kwargs not an object: $(cat "$work/body")"

# A gateway on another node learns the template with the model's description (Node.DescribeModels).
start_node 1 --role gateway
EXASERVE_INFERENCE_MODELS="$work/good/exa-tiny-arith" \
  start_node 2 --role inference --join "127.0.0.1:$(port_of 1 gossip_port)"
http="http://127.0.0.1:$(port_of 1 http_port)"
remote_chat() {
  [ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"12+30"}],"max_tokens":4,"temperature":0}')" = 200 ]
}
wait_for 30 remote_chat || { tail -5 "$work/n1.log"; fail "the gateway node never answered a chat: $(cat "$work/body")"; }
[ "$(field 'd["usage"]["prompt_tokens"]')" = "$want_tokens" ] ||
  fail "remote chat prompt_tokens $(field 'd["usage"]["prompt_tokens"]'), the rendering's $want_tokens"
[ "$(field 'd["choices"][0]["message"]["content"]')" = "$want_text" ] || fail "remote chat: $(cat "$work/body")"

# A template outside the subset fails the model's load, naming the file, line and construct.
with_template "$work/bad" $'ok\n{% call foo() %}x{% endcall %}'
EXASERVE_INFERENCE_MODELS="$work/bad/exa-tiny-arith" "$BIN/exaserved" --data-dir "$work/bad/data" \
  --bind 127.0.0.1 --http-port 0 --grpc-port 0 --gossip-port 0 >"$work/bad.log" 2>&1 &
bad_pid=$!
wait_for 30 grep -q "chat_template: line 2: {% call %} is not supported" "$work/bad.log" ||
  { cat "$work/bad.log"; fail "a bad chat template did not fail the load with its line"; }
echo PASS
