#!/usr/bin/env bash
# Mid-stream failover (docs/architecture.md#failover): a gateway and four sim inference nodes
# (~20 ms a token, so streams are long enough to be caught mid-way). The same 16 requests —
# greedy and seeded, SSE and non-streaming HTTP (completions and chat), gRPC through
# exaserve-cli, and the official openai npm client — run once without faults, then again while
#   1. an inference node is killed with SIGKILL,
#   2. another is frozen with SIGSTOP (its streams stall; the gateway's stall timeout is 1 s);
# every request must succeed with exactly the output of the fault-free run (no token lost,
# repeated or reordered, usage counted once). Then 20 streams of 500 tokens run while a third
# gets SIGTERM with a 2 s drain timeout: all finish on the last node and the drained one exits
# 0. Last, that node is killed with nothing left to resume on: the streams end with an explicit
# error after the gateway's resume deadline, never a hang. Each fault hits the node serving the
# most sequences at that moment, so the router's placement cannot leave it idle.
source "$(dirname "$0")/lib.sh"
BIN=$1
CLI="$BIN/exaserve-cli"
tools="$(cd "$(dirname "$0")/../tools/openai" && pwd)"
[ -d "$tools/node_modules/openai" ] || fail "openai client not installed: run scripts/setup-deps.sh"
work=$(mktemp -d)
trap 'kill -CONT "${pids[${frozen:-0}]:-}" 2>/dev/null || true; kill_nodes; rm -rf "$work"' EXIT

EXASERVE_GATEWAY_STREAM_STALL_TIMEOUT=1s EXASERVE_GATEWAY_RESUME_DEADLINE=2s \
  start_node 1 --role gateway --log-level debug
seed="127.0.0.1:$(port_of 1 gossip_port)"
gw="http://127.0.0.1:$(port_of 1 http_port)"
grpc="127.0.0.1:$(port_of 1 grpc_port)"
for n in 2 3 4 5; do
  EXASERVE_INFERENCE_BACKEND=sim EXASERVE_INFERENCE_KV_CACHE_BYTES=8Gi \
    EXASERVE_LIFECYCLE_DRAIN_TIMEOUT=2s start_node $n --role inference --join "$seed"
done
ready() {
  [ "$(curl -s "$gw/metrics" | awk '/^exaserve_gateway_watched_nodes / {print $2}')" = 4 ] &&
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$gw/v1/completions" -d '{"prompt":"1+1=","max_tokens":2}')" = 200 ]
}
wait_for 30 ready || fail "the gateway did not see four inference nodes"

cat >"$work/clients.py" <<'PY'
# HTTP clients: python3 clients.py GATEWAY OUT.json REQUESTS_JSON (each {"chat", "body"}).
import json, sys, threading, urllib.request, urllib.error
gw, out, reqs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
results = {}
def one(i, r):
    chat, body = r["chat"], r["body"]
    res = {"text": "", "finish_reason": None, "completion_tokens": None, "error": None}
    url = gw + ("/v1/chat/completions" if chat else "/v1/completions")
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            if not body.get("stream"):
                b = json.load(resp)
                c = b["choices"][0]
                res["text"] = c["message"]["content"] if chat else c["text"]
                res["finish_reason"], res["completion_tokens"] = c["finish_reason"], b["usage"]["completion_tokens"]
            else:
                for line in resp:
                    line = line.decode().strip()
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    ev = json.loads(line[6:])
                    if "error" in ev:
                        res["error"] = ev["error"]["message"]
                    for c in ev.get("choices", []):
                        res["text"] += (c.get("delta", {}).get("content") or "") if chat else (c.get("text") or "")
                        res["finish_reason"] = c.get("finish_reason") or res["finish_reason"]
                    if ev.get("usage"):
                        res["completion_tokens"] = ev["usage"]["completion_tokens"]
    except urllib.error.HTTPError as e:
        res["error"] = f"HTTP {e.code}: {e.read().decode()}"
    except Exception as e:
        res["error"] = f"client: {e!r}"
    results[f"http-{i}"] = res
threads = [threading.Thread(target=one, args=(i, r)) for i, r in enumerate(reqs)]
for t in threads: t.start()
for t in threads: t.join()
json.dump(results, open(out, "w"))
PY

# The request set: prompts differ, half of each kind sampled with a seed.
http_requests() {  # MAX_TOKENS COUNT
  python3 -c "
import json, sys
n, m = int(sys.argv[2]), int(sys.argv[1])
out = []
for i in range(n):
    chat = i % 2 == 1
    body = {'max_tokens': m, 'stream': i % 4 != 3, 'stream_options': {'include_usage': True}}
    if i % 4 == 3: del body['stream_options']
    if chat: body['messages'] = [{'role': 'user', 'content': f'{i}+{i}='}]
    else: body['prompt'] = f'{i}+{i}='
    if i >= n // 2: body.update(temperature=0.9, seed=100 + i)
    out.append({'chat': chat, 'body': body})
print(json.dumps(out))" "$1" "$2"
}
openai_requests='[{"model":"exa-tiny-arith","prompt":"11+1=","max_tokens":150},
  {"model":"exa-tiny-arith","prompt":"12+1=","max_tokens":150},
  {"model":"exa-tiny-arith","prompt":"13+1=","max_tokens":150,"temperature":0.9,"seed":7},
  {"model":"exa-tiny-arith","prompt":"14+1=","max_tokens":150,"temperature":0.9,"seed":8}]'

# run_all NAME: starts the 16 requests at once (their pids in running[]); results in $work/NAME.*.
run_all() {
  local name=$1
  running=()
  python3 "$work/clients.py" "$gw" "$work/$name.http.json" "$(http_requests 150 8)" & running+=($!)
  node "$tools/streams.mjs" "$gw/v1" "$openai_requests" >"$work/$name.openai" 2>&1 & running+=($!)
  for i in 0 1 2 3; do
    local sampling=()
    [ $i -ge 2 ] && sampling=(--temperature 0.9 --seed $((200 + i)))
    "$CLI" --addr "$grpc" --timeout 60s --json generate --max-tokens 150 "${sampling[@]}" "2$i+2=" \
      >"$work/$name.grpc$i" 2>&1 & running+=($!)
  done
}
# outputs NAME: one JSON object, request key -> what its client got.
outputs() {
  python3 - "$work" "$1" <<'PY'
import json, sys, glob
work, name = sys.argv[1], sys.argv[2]
out = json.load(open(f"{work}/{name}.http.json"))
for line in open(f"{work}/{name}.openai"):
    try:
        r = json.loads(line)
    except ValueError:
        out["openai-output"] = {"error": line.strip()}
        continue
    out[r["key"]] = {"text": r["text"], "finish_reason": r["finish_reason"], "error": r["error"],
                     "completion_tokens": (r["usage"] or {}).get("completion_tokens")}
for path in sorted(glob.glob(f"{work}/{name}.grpc*")):
    ids, err, final = [], None, None
    for line in open(path):
        try:
            m = json.loads(line)
        except ValueError:
            err = (err or "") + line.strip()
            continue
        ids += m.get("token_ids", [])
        final = m.get("completion_tokens", final)
    out[path.rsplit(".", 1)[1]] = {"ids": ids, "error": err, "completion_tokens": final}
print(json.dumps(out, sort_keys=True))
PY
}
# same BASE NAME: every request of NAME succeeded with BASE's output.
same() {
  python3 - "$(outputs "$1")" "$(outputs "$2")" "$2" <<'PY'
import json, sys
base, run, name = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
bad = [k for k in base if base[k].get("error")]
if bad: sys.exit(f"the fault-free run failed: {[(k, base[k]) for k in bad]}")
diff = [(k, base[k], run.get(k)) for k in base if run.get(k) != base[k]]
if diff:
    for k, b, r in diff[:4]: print(f"{name} {k}:\n  expected {b}\n  got      {r}", file=sys.stderr)
    sys.exit(f"{name}: {len(diff)} of {len(base)} requests differ from the fault-free run")
print(f"{name}: {len(base)} requests, outputs identical to the fault-free run")
PY
}
metric() { curl -s "$gw/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
firsts() { metric exaserve_gateway_ttft_seconds_count | cut -d. -f1; }
# mark_firsts, then all_started N: waits until N requests more than at the mark have their first
# token, so that a fault lands mid-stream (a resume) rather than before the first token (a
# retry): on a loaded machine a fixed sleep may not even see the clients routed.
mark_firsts() { firsts_seen=$(( $(firsts || echo 0) + 0 )); }
all_started() {
  local want=$(( firsts_seen + $1 ))
  started() { [ $(( $(firsts || echo 0) + 0 )) -ge "$want" ]; }
  wait_for 20 started || fail "the $1 requests did not all get their first token"
}
# busiest N...: of inference nodes N..., the one whose replicas hold the most sequences now. The
# nodes are read at once, from addresses looked up beforehand: on a loaded machine a python3 per
# node took seconds, and the streams had ended by the time the last node was read.
declare -A metrics_url
for n in 2 3 4 5; do metrics_url[$n]="http://127.0.0.1:$(port_of "$n" http_port)/metrics"; done
busiest() {
  local n best=$1 most=-1 s reads=()
  for n in "$@"; do curl -s "${metrics_url[$n]}" >"$work/busiest.$n" & reads+=($!); done
  wait "${reads[@]}" || true
  for n in "$@"; do
    s=$(awk '/^exaserve_replica_(running|waiting)_sequences[{ ]/ {s += $2} END {print s + 0}' \
      "$work/busiest.$n")
    if [ "${s%.*}" -gt "$most" ]; then most=${s%.*}; best=$n; fi
  done
  echo "$best"
}

run_all base
wait "${running[@]}" || true
for k in $(seq 0 3); do [ -s "$work/base.grpc$k" ] || fail "gRPC request $k printed nothing"; done

mark_firsts
run_all kill
all_started 16
killed=$(busiest 2 3 4 5)
kill -9 "${pids[$killed]}"
wait "${running[@]}" || true
same base kill || fail "SIGKILL of node $killed changed or failed requests"
resumed=$(metric 'exaserve_gateway_resumes_total{cause="stream_error"}')
[ "${resumed:-0}" != 0 ] ||
  fail "no stream was resumed after node $killed, the busiest, was killed (nothing was on it?)"
echo "kill -9 of node $killed: $resumed streams resumed"
left=(); for n in 2 3 4 5; do [ "$n" = "$killed" ] || left+=("$n"); done

mark_firsts
run_all stop
all_started 16
frozen=$(busiest "${left[@]}")
kill -STOP "${pids[$frozen]}"
start=$(date +%s%N)
wait "${running[@]}" || true
same base stop || fail "SIGSTOP of node $frozen changed or failed requests"
stalled=$(( $(metric 'exaserve_gateway_resumes_total{cause="stalled"}' || echo 0) + 0 ))
suspect=$(( $(metric 'exaserve_gateway_resumes_total{cause="node_suspect"}' || echo 0) + 0 ))
[ $(( stalled + suspect )) -gt 0 ] || fail "no stream left the frozen node $frozen"
echo "SIGSTOP of node $frozen: resumed $stalled stalled and $suspect suspected streams, done $(( ($(date +%s%N) - start) / 1000000 )) ms after the freeze"
kill -9 "${pids[$frozen]}"
left2=(); for n in "${left[@]}"; do [ "$n" = "$frozen" ] || left2+=("$n"); done

# Drain: 20 streams of 500 tokens (~10 s), SIGTERM on the busier of the two nodes left with a 2 s
# drain timeout.
all_resumes() { curl -s "$gw/metrics" | awk '/^exaserve_gateway_resumes_total\{/ {s += $2} END {print s + 0}'; }
before=$(all_resumes)
mark_firsts
python3 "$work/clients.py" "$gw" "$work/drain.json" "$(http_requests 500 20 | python3 -c "
import json, sys; r = json.load(sys.stdin)
for x in r: x['body'].update(stream=True, stream_options={'include_usage': True})
print(json.dumps(r))")" & drain=$!
all_started 20
sleep 0.5
drained=$(busiest "${left2[@]}")
last_node=${left2[0]}; [ "$last_node" != "$drained" ] || last_node=${left2[1]}
kill -TERM "${pids[$drained]}"
wait "${pids[$drained]}" || fail "node $drained exited $? after draining"
wait $drain
python3 - "$work/drain.json" <<'PY' || fail "streams cut by the drain"
import json, sys
r = json.load(open(sys.argv[1]))
bad = {k: v for k, v in r.items() if v["error"] or v["completion_tokens"] != 500}
if bad: sys.exit(f"{len(bad)} of {len(r)} drained streams failed: {list(bad.items())[:2]}")
print(f"drain: {len(r)} streams of 500 tokens finished, 0 errors")
PY
[ "$(all_resumes)" -gt "$before" ] || fail "no stream was handed over by the draining node $drained"

# Nothing left to resume on: an explicit error after the resume deadline (2 s), never a hang.
python3 "$work/clients.py" "$gw" "$work/last.json" "$(http_requests 300 4)" & last=$!
sleep 1
kill -9 "${pids[$last_node]}"
start=$(date +%s%N)
wait $last
python3 - "$work/last.json" <<'PY' || fail "with no replica left"
import json, sys
r = json.load(open(sys.argv[1]))
ok = all(v["error"] for v in r.values())
print(f"no replica left: {sum(bool(v['error']) for v in r.values())} of {len(r)} requests got an explicit error")
sys.exit(0 if ok else f"some requests did not fail: {r}")
PY
took=$(( ($(date +%s%N) - start) / 1000000 ))
[ $took -lt 10000 ] || fail "errors took $took ms after the last node died"
echo "failover: ok (errors $took ms after the last node died)"
