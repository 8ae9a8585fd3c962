#!/usr/bin/env bash
# The single-node default answers with the bundled model over the OpenAI HTTP API (completions,
# chat, SSE streaming) and over gRPC (exaserve-cli generate); bad requests get 4xx JSON errors
# naming the field; a streaming client that disconnects does not hurt the next request.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT

start_daemon

post() { curl -s -o "$work/body" -w '%{http_code}' "$http$1" -H 'Content-Type: application/json' -d "$2"; }
field() { python3 -c "import json,sys; d=json.load(open('$work/body')); print(eval(sys.argv[1]))" "$1"; }

[ "$(post /v1/completions '{"prompt":"1+1=","max_tokens":4}')" = 200 ] || fail "completions: $(cat "$work/body")"
[ "$(field 'd["choices"][0]["text"]')" = 2 ] || fail "1+1= answered $(cat "$work/body")"
[ "$(field 'd["choices"][0]["finish_reason"]')" = stop ] || fail "finish_reason"
[ "$(field 'd["usage"]["prompt_tokens"] > 0')" = True ] || fail "usage"
# logit_bias -100 bans a token: the answer's own token is never chosen.
[ "$(post /tokenize '{"prompt":"2","add_special_tokens":false}')" = 200 ] || fail "tokenize: $(cat "$work/body")"
two=$(field 'd["tokens"][0]')
[ "$(post /v1/completions "{\"prompt\":\"1+1=\",\"max_tokens\":1,\"logit_bias\":{\"$two\":-100}}")" = 200 ] ||
  fail "logit_bias: $(cat "$work/body")"
[ "$(field 'd["choices"][0]["text"]')" != 2 ] || fail "logit_bias -100 on token $two: $(cat "$work/body")"
# vLLM's ignore_eos: the answer's end-of-sequence no longer ends it, max_tokens are generated.
[ "$(post /v1/completions '{"prompt":"1+1=","max_tokens":4,"ignore_eos":true}')" = 200 ] ||
  fail "ignore_eos: $(cat "$work/body")"
[ "$(field 'd["usage"]["completion_tokens"], d["choices"][0]["finish_reason"]')" = "(4, 'length')" ] ||
  fail "ignore_eos: $(cat "$work/body")"
# vLLM's min_tokens: nothing ends the answer before 3 tokens, so the model goes on after its "2".
[ "$(post /v1/completions '{"prompt":"1+1=","max_tokens":6,"min_tokens":3}')" = 200 ] ||
  fail "min_tokens: $(cat "$work/body")"
[ "$(field 'd["usage"]["completion_tokens"] >= 3 and d["choices"][0]["text"].startswith("2")')" = True ] ||
  fail "min_tokens: $(cat "$work/body")"

[ "$(post /v1/chat/completions '{"model":"exa-tiny-arith","messages":[{"role":"user","content":"123+456="}]}')" = 200 ] ||
  fail "chat: $(cat "$work/body")"
[ "$(field 'd["choices"][0]["message"]["content"]')" = 579 ] || fail "chat answered $(cat "$work/body")"

stream=$(curl -sN "$http/v1/chat/completions" -d '{"messages":[{"role":"user","content":"40+2="}],"stream":true}')
text=$(sed -n 's/^data: //p' <<<"$stream" | grep -v '^\[DONE\]' |
  python3 -c "import json,sys; print(''.join(json.loads(l)['choices'][0]['delta'].get('content','') for l in sys.stdin if l.strip()))")
[ "$text" = 42 ] || fail "stream text '$text' from: $stream"
tail -n 2 <<<"$stream" | has '^data: \[DONE\]' || fail "stream did not end with [DONE]"

[ "$("$BIN/exaserve-cli" --addr "$grpc" generate "2+2=")" = 4 ] || fail "cli generate"

[ "$(curl -s -o /dev/null -w '%{http_code}' "$http/v1/models")" = 200 ] || fail "models"

# Bad input: each a 4xx naming the field or value.
expect_error() {  # expect_error STATUS SUBSTRING PATH BODY
  local code; code=$(post "$3" "$4")
  [ "$code" = "$1" ] || fail "$4 -> $code, want $1: $(cat "$work/body")"
  grep -q -- "$2" "$work/body" || fail "$4 -> error without '$2': $(cat "$work/body")"
}
expect_error 400 "prompt: must not be empty" /v1/completions '{"prompt":""}'
expect_error 400 "max_tokens" /v1/completions '{"prompt":"1+1=","max_tokens":0}'
expect_error 400 "exceeds the context length of 256" /v1/completions "{\"prompt\":\"$(printf '1+%.0s' $(seq 300))\",\"max_tokens\":5}"
# The prompt alone is too long: the error names it (not max_tokens), with OpenAI's code.
grep -q '"code":"context_length_exceeded".*"param":"prompt"' "$work/body" || fail "context overflow: $(cat "$work/body")"
expect_error 404 "model \\\\\"nope\\\\\"" /v1/completions '{"prompt":"1+1=","model":"nope"}'
# NAME@VERSION, as "available:" and /v1/models print it, is a model the API takes.
expect_error 404 'version \\"v9\\": not served; available: exa-tiny-arith@v1' /v1/completions '{"prompt":"1+1=","model":"exa-tiny-arith@v9"}'
[ "$(post /v1/completions '{"prompt":"1+1=","model":"exa-tiny-arith@v1","max_tokens":2}')" = 200 ] ||
  fail "model exa-tiny-arith@v1: $(cat "$work/body")"
expect_error 400 "invalid JSON" /v1/completions '{"prompt":'
expect_error 400 "temperature" /v1/completions '{"prompt":"1+1=","temperature":-1}'
expect_error 400 "top_p" /v1/completions '{"prompt":"1+1=","top_p":0}'
expect_error 400 "n: 17 is outside \[1, 16\]" /v1/completions '{"prompt":"1+1=","n":17}'
expect_error 400 "messages" /v1/chat/completions '{"messages":[]}'
# Numbers past what their field holds are refused as sent, never wrapped; types are checked
# before use (each of these was a 500 or a silent wrap once).
expect_error 400 "number overflow parsing '1e400'" /v1/completions '{"prompt":"x","foo":1e400}'
expect_error 400 '"param":"temperature"' /v1/completions '{"prompt":"1+1=","temperature":-1}'
expect_error 400 "max_tokens: 3000000000 is outside \[1, 4096\]" /v1/completions '{"prompt":"1+1=","max_tokens":3000000000}'
expect_error 400 '"param":"max_completion_tokens"' /v1/completions '{"prompt":"1+1=","max_completion_tokens":0}'
expect_error 400 "prompt\[0\]: 4294967297 is outside" /v1/completions '{"prompt":[4294967297],"max_tokens":3}'
expect_error 400 "top_k: 4294967296 is outside" /v1/completions '{"prompt":"1+1=","top_k":4294967296,"temperature":1}'
expect_error 400 "stream_options.include_usage: expected true or false" /v1/completions '{"prompt":"1+1=","stream_options":{"include_usage":"yes"}}'
expect_error 400 "messages\[0\].role: expected a string" /v1/chat/completions '{"messages":[{"role":5,"content":"hi"}]}'
expect_error 400 "text must be a string" /v1/chat/completions '{"messages":[{"role":"user","content":[{"type":"text","text":5}]}]}'
expect_error 400 "every message's content is empty" /v1/chat/completions '{"messages":[{"role":"user","content":""}]}'
# Log-probabilities: bounded (20), typed, top_logprobs only with logprobs true (and not a field of
# /v1/completions, whose logprobs is the count).
expect_error 400 '"param":"logprobs"' /v1/completions '{"prompt":"1+1=","logprobs":21}'
expect_error 400 '"param":"logprobs"' /v1/chat/completions '{"messages":[{"role":"user","content":"1+1="}],"logprobs":"yes"}'
expect_error 400 '"param":"top_logprobs"' /v1/chat/completions '{"messages":[{"role":"user","content":"1+1="}],"top_logprobs":3}'
expect_error 400 '"param":"top_logprobs"' /v1/completions '{"prompt":"1+1=","top_logprobs":3}'
# OpenAI fields the server does not implement are refused by name when asked for, and accepted
# at their defaults.
expect_error 400 "echo: not supported" /v1/completions '{"prompt":"1+1=","echo":true}'
expect_error 400 "best_of: only 1" /v1/completions '{"prompt":"1+1=","best_of":3}'
expect_error 400 '"param":"logit_bias"' /v1/completions '{"prompt":"1+1=","logit_bias":{"x":-100}}'
# Tools need a chat template that writes calls the gateway parses; the bundled model has none.
expect_error 400 "chat template does not write tool calls" /v1/chat/completions '{"messages":[{"role":"user","content":"1+1="}],"tools":[{"type":"function","function":{"name":"f"}}]}'
expect_error 400 '"param":"tool_choice"' /v1/chat/completions '{"messages":[{"role":"user","content":"1+1="}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"}'
# Structured outputs (docs/reference/api.md#structured-outputs): the reply is JSON that matches
# the schema, through gateway, node and engine, streamed or not; a schema beyond the supported
# subset is refused naming its keyword.
[ "$(post /v1/completions '{"prompt":"12+30=","max_tokens":8,"response_format":{"type":"json_schema","json_schema":{"name":"sum","schema":{"type":"integer"}}}}')" = 200 ] ||
  fail "json_schema integer: $(cat "$work/body")"
[ "$(field 'd["choices"][0]["text"]')" = 42 ] || fail "json_schema integer answer: $(cat "$work/body")"
[ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"12+30="}],"max_tokens":240,"response_format":{"type":"json_schema","json_schema":{"name":"r","strict":true,"schema":{"type":"object","properties":{"sum":{"type":"integer"},"unit":{"enum":["kg","m"]}},"required":["sum","unit"],"additionalProperties":false}}}}')" = 200 ] ||
  fail "json_schema object: $(cat "$work/body")"
python3 - "$work/body" <<'PY' || fail "json_schema object reply: $(cat "$work/body")"
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
assert c["finish_reason"] == "stop", c
v = json.loads(c["message"]["content"])
assert set(v) == {"sum", "unit"} and isinstance(v["sum"], int) and v["unit"] in ("kg", "m"), v
PY
curl -sN "$http/v1/chat/completions" -d '{"messages":[{"role":"user","content":"1+1="}],"max_tokens":240,"stream":true,"response_format":{"type":"json_object"}}' >"$work/sse"
python3 - "$work/sse" <<'PY' || fail "json_object stream: $(cat "$work/sse")"
import json, sys
events = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: {")]
text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
assert isinstance(json.loads(text), dict), text
assert events[-1]["choices"][0]["finish_reason"] == "stop", events[-1]
PY
expect_error 400 "response_format: schema.properties.n.multipleOf: not supported" /v1/chat/completions '{"messages":[{"role":"user","content":"1+1="}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"n":{"type":"integer","multipleOf":2}}}}}}'
[ "$(post /v1/completions '{"prompt":"12+30=","max_tokens":8,"guided_choice":["41","42","43"]}')" = 200 ] ||
  fail "guided_choice: $(cat "$work/body")"
python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['choices'][0]
assert c['text'] == '42' and c['finish_reason'] == 'stop', c" "$work/body" || fail "guided_choice: $(cat "$work/body")"
[ "$(post /v1/completions '{"prompt":"12+30=","max_tokens":8,"guided_regex":"[5-9][0-9]{2}"}')" = 200 ] ||
  fail "guided_regex: $(cat "$work/body")"
python3 -c "import json,re,sys; c=json.load(open(sys.argv[1]))['choices'][0]
assert re.fullmatch('[5-9][0-9]{2}', c['text']) and c['finish_reason'] == 'stop', c" "$work/body" ||
  fail "guided_regex: $(cat "$work/body")"
expect_error 400 'guided_regex: at byte 5: backreferences are not supported' /v1/completions '{"prompt":"1+1=","guided_regex":"(a)\\1"}'
expect_error 400 "guided_json: schema: no integer within minimum" /v1/completions '{"prompt":"1+1=","guided_json":{"type":"integer","minimum":5,"maximum":1}}'
"$BIN/exaserve-cli" --addr "$grpc" --json generate --max-tokens 8 --json-schema '{"type":"integer","minimum":100,"maximum":999}' "12+30=" >"$work/js"
python3 -c "import json,sys; m=[json.loads(l) for l in open(sys.argv[1])]
assert 100 <= int(''.join(x.get('text','') for x in m)) <= 999, m" "$work/js" ||
  fail "gRPC json_schema with bounds: $(cat "$work/js")"
expect_error 400 '"param":"response_format"' /v1/chat/completions '{"messages":[{"role":"user","content":"1+1="}],"response_format":{"type":"yaml"}}'
expect_error 400 "guided_json: schema.type" /v1/completions '{"prompt":"1+1=","guided_json":{"type":"text"}}'
"$BIN/exaserve-cli" --addr "$grpc" --json generate --max-tokens 8 --json-schema '{"type":"integer"}' "12+30=" >"$work/js"
python3 -c "import json,sys; m=[json.loads(l) for l in open(sys.argv[1])]
assert ''.join(x.get('text','') for x in m) == '42', m" "$work/js" || fail "gRPC json_schema: $(cat "$work/js")"
out=$("$BIN/exaserve-cli" --addr "$grpc" generate --max-tokens 8 --regex '[5-9][0-9]{2}' "12+30=")
[[ "$out" =~ ^[5-9][0-9]{2}$ ]] || fail "gRPC regex: $out"
out=$("$BIN/exaserve-cli" --addr "$grpc" generate --max-tokens 8 --choice 7 --choice 42 "12+30=")
[ "$out" = 42 ] || fail "gRPC choice: $out"
code=0; "$BIN/exaserve-cli" --addr "$grpc" generate --regex '(?=a)' "1+1=" 2>"$work/err" || code=$?
[ "$code" = 2 ] && grep -q "regex: at byte 1: lookahead" "$work/err" || fail "gRPC bad regex: $code $(cat "$work/err")"
[ "$(post /v1/completions '{"prompt":"1+1=","max_tokens":2,"logprobs":null,"echo":false,"best_of":1,"logit_bias":{},"suffix":""}')" = 200 ] ||
  fail "defaults of unsupported fields refused: $(cat "$work/body")"
[ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"1+1="}],"max_tokens":2,"logprobs":false,"top_logprobs":0,"tools":[],"response_format":{"type":"text"}}')" = 200 ] ||
  fail "chat defaults of unsupported fields refused: $(cat "$work/body")"
# min_tokens and min_p over gRPC: the answer goes on past its "2"; min_p 1 keeps only the most
# likely token however hot the temperature; out of range, exit 2 naming the field.
"$BIN/exaserve-cli" --addr "$grpc" --json generate --min-tokens 3 --max-tokens 6 --temperature 2 \
  --min-p 1 --seed 9 "1+1=" >"$work/mt"
python3 - "$work/mt" <<'PY' || fail "gRPC min_tokens: $(cat "$work/mt")"
import json, sys
msgs = [json.loads(l) for l in open(sys.argv[1])]
ids = sum((m["token_ids"] for m in msgs), [])
assert len(ids) >= 3, ids
assert "".join(m.get("text", "") for m in msgs).startswith("2"), msgs
PY
code=0; "$BIN/exaserve-cli" --addr "$grpc" generate --min-p 1.5 "1+1=" 2>"$work/err" || code=$?
[ "$code" = 2 ] && grep -q "min_p" "$work/err" || fail "--min-p 1.5: exit $code, $(cat "$work/err")"
# gRPC returns each token's log-probability when asked, one per token id; not otherwise.
"$BIN/exaserve-cli" --addr "$grpc" --json generate --logprobs --max-tokens 3 "1+1=" >"$work/lp"
python3 - "$work/lp" <<'PY' || fail "gRPC logprobs: $(cat "$work/lp")"
import json, sys
msgs = [json.loads(l) for l in open(sys.argv[1])]
ids = sum((m["token_ids"] for m in msgs), [])
lps = sum((m["logprobs"] for m in msgs), [])
assert ids and len(ids) == len(lps), (ids, lps)
assert all(lp <= 0 for lp in lps), lps
assert lps[0] > -0.7, lps  # greedy "2" after "1+1=": the bundled model is sure of it
# The final message's usage times the first token; the first carries the seed the gateway chose.
assert msgs[-1]["time_to_first_token_ms"] > 0, msgs[-1]
assert "seed" in msgs[0], msgs[0]
PY
"$BIN/exaserve-cli" --addr "$grpc" --json generate --max-tokens 3 "1+1=" | has logprobs &&
  fail "logprobs sent without being asked"
code=$(printf '{"prompt":"\xff\xfe"}' | curl -s -o "$work/body" -w '%{http_code}' "$http/v1/completions" --data-binary @-)
[ "$code" = 400 ] && grep -q "UTF-8" "$work/body" || fail "invalid UTF-8 -> $code $(cat "$work/body")"
set +e
"$BIN/exaserve-cli" --addr "$grpc" generate "" 2>"$work/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "prompt: must not be empty" "$work/err" || fail "cli empty prompt rc=$rc"

# A client that walks away mid-stream: the daemon keeps serving.
timeout 0.2 curl -sN "$http/v1/completions" -d '{"prompt":"1+","max_tokens":200,"stream":true,"temperature":1,"seed":1}' >/dev/null || true
[ "$(post /v1/completions '{"prompt":"5+5=","max_tokens":4}')" = 200 ] || fail "after disconnect"
[ "$(field 'd["choices"][0]["text"]')" = 10 ] || fail "5+5= answered $(cat "$work/body")"
kill -0 $pid || fail "daemon died"

kill -TERM $pid
wait $pid || fail "exit code $?"
pid=
echo "serving: ok"
