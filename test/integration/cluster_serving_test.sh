#!/usr/bin/env bash
# A gateway-only node routes to replicas on two inference nodes it learned through membership
# and their load streams: requests are answered (HTTP and gRPC) and spread over both nodes.
# kill -9 one inference node under load: no request hangs or fails — those not yet streaming are
# retried on the other node, those streaming continue there (docs/architecture.md#failover) —
# no answer is silently truncated, and new requests keep succeeding.
source "$(dirname "$0")/lib.sh"
BIN=$1
CLI="$BIN/exaserve-cli"
work=$(mktemp -d)
trap 'kill_nodes; rm -rf "$work"' EXIT

start_node 1 --role gateway --log-level debug
seed="127.0.0.1:$(port_of 1 gossip_port)"
gw="http://127.0.0.1:$(port_of 1 http_port)"
# The sim backend (~20 ms a token) keeps requests in flight long enough for the kill to hit them.
for n in 2 3; do
  EXASERVE_INFERENCE_BACKEND=sim EXASERVE_INFERENCE_KV_CACHE_BYTES=8Gi \
    start_node $n --role inference --join "$seed" --log-level debug
done

answers() {  # the gateway answers through a remote replica
  [ "$(curl -s "$gw/v1/completions" -d '{"prompt":"1+1=","max_tokens":2}' -o /dev/null -w '%{http_code}')" = 200 ]
}
wait_for 15 answers || { tail -5 "$work/n1.log"; fail "the gateway never answered through the inference nodes"; }
grep -q exa-tiny-arith <<<"$(curl -s "$gw/v1/models")" || fail "/v1/models does not list the remote model"
# One request followed across nodes: the caller's x-request-id is in the gateway's log line and in
# the serving node's start and finish lines.
rid="trace-$$-$RANDOM"
curl -s -o /dev/null -H "x-request-id: $rid" "$gw/v1/completions" -d '{"prompt":"1+1=","max_tokens":2}'
traced() {
  grep "\"request_id\":\"$rid\"" "$work/n1.log" | has "request finished" &&
    [ "$(cat "$work/n2.log" "$work/n3.log" | grep "\"request_id\":\"$rid\"" | grep -c -E "request (started|finished)")" = 2 ]
}
wait_for 5 traced || fail "request $rid is not in the gateway's and the serving node's logs"
code=$(curl -s -o "$work/badid.json" -w '%{http_code}' -H 'x-request-id: a b' "$gw/v1/completions" \
  -d '{"prompt":"1+1=","max_tokens":2}')
[ "$code" = 400 ] && grep -q request_id "$work/badid.json" || fail "a bad x-request-id: $code $(cat "$work/badid.json")"
"$CLI" --addr "127.0.0.1:$(port_of 1 grpc_port)" generate --max-tokens 3 "1+1=" >/dev/null ||
  fail "gRPC generate through the gateway"
# Log-probabilities cross the gateway-to-node hop: one per token id, the first one confident, each
# with its position's two most likely tokens.
"$CLI" --addr "127.0.0.1:$(port_of 1 grpc_port)" --json generate --logprobs --top-logprobs 2 \
  --max-tokens 3 "1+1=" |
  python3 -c "
import json, sys
msgs = [json.loads(l) for l in sys.stdin]
ids = sum((m['token_ids'] for m in msgs), []); lps = sum((m['logprobs'] for m in msgs), [])
tops = sum((m['top_logprobs'] for m in msgs), [])
sys.exit(0 if ids and len(ids) == len(lps) == len(tops) and all(len(t) == 2 for t in tops)
         and all(lp <= 0 for lp in lps) and lps[0] > -0.7 else 1)
" || fail "logprobs through the gateway"
# And over HTTP, with each position's alternatives (GenerateResponse.top_logprobs on that hop).
curl -s "$gw/v1/chat/completions" \
  -d '{"messages":[{"role":"user","content":"1+1="}],"max_tokens":3,"logprobs":true,"top_logprobs":3}' |
  python3 -c "
import json, sys
content = json.load(sys.stdin)['choices'][0]['logprobs']['content']
sys.exit(0 if content and all(len(t['top_logprobs']) == 3 and t['logprob'] <= 0 for t in content) else 1)
" || fail "top_logprobs through the gateway"

served() {  # Node.Generate calls node N took
  curl -s "http://127.0.0.1:$(port_of "$1" http_port)/metrics" |
    awk '/^exaserve_node_generate_requests_total / {print $2}'
}
clients=()
for i in $(seq 1 12); do
  curl -s -o /dev/null "$gw/v1/completions" -d '{"prompt":"2+2=","max_tokens":20}' & clients+=($!)
done
wait "${clients[@]}"
echo "spread: node2 served $(served 2), node3 served $(served 3)"
[ "$(served 2)" -gt 0 ] && [ "$(served 3)" -gt 0 ] || fail "requests did not spread over both nodes"

# A replica relabelled while it runs is routed by its new label at the gateway's next load
# report (the gateway once kept the labels it first saw, so this stayed a 404).
r3="$(head -c 8 "$work/n3/node_id")/exa-tiny-arith@v1#0"
"$CLI" --addr "127.0.0.1:$(port_of 3 grpc_port)" replica label --selector "replica=$r3" \
  --label track=b >/dev/null || fail "replica label on node 3"
"$CLI" --addr "127.0.0.1:$(port_of 1 grpc_port)" gateway route --header x-track \
  --target label:track >/dev/null || fail "gateway route"
track_b() {
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'x-track: b' "$gw/v1/completions" \
    -d '{"prompt":"1+1=","max_tokens":2}')" = 200 ]
}
wait_for 10 track_b || fail "x-track: b never reached the relabelled replica $r3"
before2=$(served 2)
for i in 1 2 3 4; do track_b || fail "x-track: b request $i"; done
[ "$(served 2)" = "$before2" ] || fail "x-track: b requests reached node 2, which has no track=b"
"$CLI" --addr "127.0.0.1:$(port_of 1 grpc_port)" gateway route --remove x-track >/dev/null

# Load, then kill -9 node 3 two seconds in.
python3 - "$gw" "$work/result.json" <<'PY' &
import json, sys, threading, time, urllib.request, urllib.error, random
gw, out = sys.argv[1], sys.argv[2]
stats = {"ok": 0, "http_error": 0, "stream_ok": 0, "stream_error_event": 0, "truncated": 0,
         "hung": 0, "late_failures": 0, "bad_error_body": 0, "late_errors": []}
lock = threading.Lock()
start = time.time()
def bump(k):
    with lock: stats[k] += 1
def worker(seed):
    rng = random.Random(seed)
    while time.time() - start < 6:
        stream = rng.random() < 0.5
        t0 = time.time()
        body = json.dumps({"prompt": "1+1=", "max_tokens": rng.randint(5, 40), "stream": stream}).encode()
        req = urllib.request.Request(gw + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                text = r.read().decode()
            if not stream:
                json.loads(text)["choices"][0]["text"]
                bump("ok")
            elif '"error"' in text:
                bump("stream_error_event")
            elif text.rstrip().endswith("data: [DONE]"):
                bump("stream_ok")
            else:
                bump("truncated")
        except urllib.error.HTTPError as e:
            message = ""
            try:
                message = json.loads(e.read().decode())["error"]["message"]
            except Exception:
                bump("bad_error_body")
            bump("http_error")
            if t0 - start > 3.5:  # well after the kill
                bump("late_failures")
                with lock:
                    if len(stats["late_errors"]) < 5: stats["late_errors"].append(f"{e.code} {message}")
        except Exception:
            bump("hung")
threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
for t in threads: t.start()
for t in threads: t.join()
json.dump(stats, open(out, "w"))
PY
load=$!
sleep 2
kill -9 "${pids[3]}"
wait $load
cat "$work/result.json"; echo
r() { json_field "$work/result.json" "$1"; }
[ "$(r hung)" = 0 ] || fail "requests hung (client timeout) after the kill"
[ "$(r truncated)" = 0 ] || fail "streams ended without [DONE] or an error event"
[ "$(r bad_error_body)" = 0 ] || fail "an HTTP error came without an OpenAI error body"
[ "$(r late_failures)" = 0 ] || {
  curl -s "http://127.0.0.1:$(port_of 2 http_port)/metrics" |
    grep -E '^exaserve_(ready|replica_healthy|replica_running|replica_waiting)'
  grep -E 'suspect|load stream|dead|alive|refut|unhealthy' "$work/n2.log" | tail -5
  fail "requests sent 1.5 s after the kill still failed"
}
[ "$(r http_error)" = 0 ] && [ "$(r stream_error_event)" = 0 ] ||
  fail "requests failed although node 2 could serve them: $(cat "$work/result.json")"
[ $(( $(r ok) + $(r stream_ok) )) -gt 20 ] || fail "too few requests succeeded"
retried=$(curl -s "$gw/metrics" | awk '/^exaserve_gateway_retries_total\{outcome="sent"\}/ {print $2}')
resumed=$(curl -s "$gw/metrics" | awk '/^exaserve_gateway_resumes_total\{/ {s += $2} END {print s + 0}')
echo "cluster serving: ok (retries sent: ${retried:-0}, streams resumed: $resumed)"
