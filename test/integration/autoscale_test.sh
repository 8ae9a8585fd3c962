#!/usr/bin/env bash
# Autoscaling with real processes (docs/architecture.md#autoscaling): a scheduler, an origin +
# gateway and four sim-backend inference nodes; a deployment autoscaled on pending tokens
# between 1 and 4 replicas. A load ramp through the gateway, from idle to three times what one
# replica's slots hold (12 streams on 4 slots) and back to one stream: the count goes 1 → 4 → 1,
# the P99 TTFT once the scale-up settled is well under the overloaded replica's, and not one
# request fails, during the scale-down included (a stopped replica drains). `autoscale status`
# shows it. Then scale to zero: minReplicas 0, idle → 0 replicas, and a completion and a gRPC
# stream that arrive then wait at the gateway while one starts.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill_nodes; kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cli() { "$BIN/exaserve-cli" "$@"; }
publish_tiny v1
start_control_plane
for n in 3 4 5 6; do
  EXASERVE_INFERENCE_REPLICAS_PER_MODEL=0 EXASERVE_INFERENCE_HOST_MEMORY_BUDGET=4Gi \
    EXASERVE_INFERENCE_BACKEND=sim EXASERVE_HEALTH_MODEL_INTERVAL=10m \
    start_node $n --role inference --join "$seed" --origin "$origin" --node-id "infer-$n"
done
wait_for 30 members_up 6 || fail "members"
cat >"$work/tiny.yaml" <<'YAML'
apiVersion: exaserve.io/v1
kind: InferenceReplica
metadata: {name: tiny}
spec:
  model: exa-tiny-arith
  version: v1
  backend: sim
  replicas: 1
  resources: {gpu: 1}
  context: 256
  concurrency: 4
  autoscaling:
    minReplicas: 1
    maxReplicas: 4
    metric: pendingTokensPerReplica
    target: 40
    scaleDownStabilization: 15s
    maxScaleDownRate: 1
YAML
# Bad input first: refused at apply, naming the field.
sed 's/minReplicas: 1/minReplicas: 5/' "$work/tiny.yaml" >"$work/bad.yaml"
set +e
cli --addr "$sched" apply -f "$work/bad.yaml" >"$work/bad.out" 2>&1; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "minReplicas" "$work/bad.out" || fail "min > max: exit $rc $(cat "$work/bad.out")"
wait_for 10 cli --addr "$sched" apply -f "$work/tiny.yaml" || fail "apply"
ready() { cli --addr "$sched" --json autoscale status tiny | python3 -c "import json,sys; print(json.load(sys.stdin)['ready'])"; }
one_ready() { [ "$(ready)" = 1 ]; }
wait_for 60 one_ready || fail "not 1 ready: $(cli --addr "$sched" describe tiny)"

# The ramp: a client per stream, each sending streamed completions back to back; the driver
# samples the ready count each second and ends each phase on the count it waits for.
python3 - "$gateway" "$BIN/exaserve-cli" "$sched" >"$work/ramp.json" 2>"$work/ramp.err" <<'PY' ||
import json, subprocess, sys, threading, time, urllib.request
gateway, cli, sched = sys.argv[1:4]
results, lock = [], threading.Lock()
sent = [0]

def one(phase):
    t0 = time.monotonic(); ttft = None; ok = False; err = ""
    with lock:
        sent[0] += 1; k = sent[0]
    # Distinct prompts, as users send: one repeated prompt would be routed to its cache.
    body = json.dumps({"model": "exa-tiny-arith", "prompt": f"{k % 97}+{k % 89}=",
                       "max_tokens": 32, "temperature": 0, "stream": True}).encode()
    try:
        req = urllib.request.Request(gateway + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data:"): continue
                if line == "data: [DONE]": ok = True; break
                if ttft is None and '"text"' in line: ttft = time.monotonic() - t0
                if '"error"' in line: err = line; break
    except Exception as e:  # an HTTP error, a reset, a timeout: a failed request
        err = repr(e)
    with lock:
        results.append({"phase": phase, "at": t0, "ttft": ttft, "ok": ok and not err, "err": err})

phase = ["up"]; streams = [12]; stop = [False]
def client(i):
    while not stop[0]:
        if i >= streams[0]: time.sleep(0.05); continue
        one(phase[0])

def ready():
    out = subprocess.run([cli, "--addr", sched, "--json", "autoscale", "status", "tiny"],
                         capture_output=True, text=True, timeout=10)
    try: return json.loads(out.stdout)["ready"]
    except Exception: return -1

threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(12)]
t_start = time.monotonic()
for t in threads: t.start()
counts = []; up_at = None; settled_at = None; down_at = None
deadline = t_start + 240
while time.monotonic() < deadline:
    time.sleep(1)
    n = ready(); now = time.monotonic(); counts.append(n)
    if phase[0] == "up" and n == 4 and up_at is None:
        up_at = now
    if phase[0] == "up" and up_at is not None and now - up_at >= 20:
        settled_at = now; phase[0] = "down"; streams[0] = 1  # back to one stream
    if phase[0] == "down" and n == 1 and now - settled_at > 5:
        down_at = now; time.sleep(5); break
stop[0] = True
for t in threads: t.join(timeout=70)

def quantile(xs, q):
    xs = sorted(xs); return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None
p99 = lambda xs: quantile(xs, 0.99)
p50 = lambda xs: quantile(xs, 0.5)
first = [r["ttft"] for r in results if r["ttft"] is not None and r["at"] < t_start + 10]
settled = [r["ttft"] for r in results if r["ttft"] is not None and up_at and
           up_at + 5 <= r["at"] < (settled_at or 0)]
print(json.dumps({
    "max_ready": max(counts), "ready_at_end": counts[-1],
    "scale_up_s": round(up_at - t_start, 1) if up_at else None,
    "scale_down_s": round(down_at - settled_at, 1) if down_at else None,
    "requests": len(results), "failed": sum(not r["ok"] for r in results),
    "failed_in_scale_down": sum(not r["ok"] for r in results if r["phase"] == "down"),
    "errors": [r["err"] for r in results if not r["ok"]][:5],
    "ttft_p99_first_10s_s": p99(first), "ttft_p99_settled_s": p99(settled),
    "ttft_p50_settled_s": p50(settled),
    "ttft_p50_one_stream_s": p50([r["ttft"] for r in results if r["phase"] == "down" and r["ttft"]])}))
PY
  fail "ramp driver: $(cat "$work/ramp.err")"
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$work/ramp.json" "$1"; }
cat "$work/ramp.json"
[ "$(field max_ready)" = 4 ] || fail "never scaled to 4: $(cat "$work/ramp.json") $(cli --addr "$sched" describe tiny)"
[ "$(field ready_at_end)" = 1 ] || fail "not back to 1: $(cat "$work/ramp.json") $(cli --addr "$sched" describe tiny)"
[ "$(field failed)" = 0 ] || fail "requests failed: $(cat "$work/ramp.json")"
# Once the scale-up settled, P99 TTFT is back to well under what one overloaded replica gave.
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); a, b = d['ttft_p99_settled_s'], d['ttft_p99_first_10s_s']
sys.exit(0 if a is not None and b and a <= 0.6 * b else 1)" "$work/ramp.json" ||
  fail "P99 TTFT after the scale-up settled is not under 0.6 x the overloaded one: $(cat "$work/ramp.json")"
cli --addr "$sched" autoscale status tiny >"$work/status.txt"
grep -q "pendingTokensPerReplica" "$work/status.txt" && grep -q "autoscaler: 1 -> " "$work/status.txt" ||
  fail "autoscale status: $(cat "$work/status.txt")"
grep -Eq "^Scale-up:   the last, to [2-4] replicas, was ready after [0-9.]+ s" "$work/status.txt" ||
  fail "no time to ready of the scale-up: $(cat "$work/status.txt")"
curl -s "http://127.0.0.1:$(port_of 2 http_port)/metrics" |
  has 'exaserve_autoscaler_decisions_total{deployment="tiny",direction="down"}' ||
  fail "no scale-down decision metric"
echo "ok: 1 → 4 → 1 replicas under a 12-stream ramp, 0 failed requests; $(cat "$work/ramp.json")"

# Scale to zero: with minReplicas 0 the idle deployment goes to 0 replicas after its 15 s window.
# A completion then waits at the gateway while a replica starts, and is answered; a model no
# deployment serves is still a 404 at once.
sed 's/minReplicas: 1/minReplicas: 0/' "$work/tiny.yaml" >"$work/zero.yaml"
cli --addr "$sched" apply -f "$work/zero.yaml" >/dev/null || fail "apply minReplicas 0"
status() { cli --addr "$sched" --json autoscale status tiny | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['$1'])"; }
at_zero() { [ "$(status ready)" = 0 ] && [ "$(status desired)" = 0 ]; }
wait_for 90 at_zero || fail "not scaled to zero: $(cli --addr "$sched" autoscale status tiny)"
code=$(curl -s -o "$work/unknown.json" -w '%{http_code}' --max-time 5 "$gateway/v1/completions" \
  -H 'content-type: application/json' -d '{"model":"no-such-model","prompt":"1+1=","max_tokens":2}')
[ "$code" = 404 ] || fail "a model nobody serves: $code $(cat "$work/unknown.json")"
started=$(date +%s.%N)
# A gRPC stream too (exaserve-cli generate, through the gateway's Inference.Generate): held
# beside the HTTP request, then streamed.
cli --addr "$origin" --timeout 90s generate --model exa-tiny-arith --max-tokens 4 "12+30=" \
  >"$work/cold-grpc.out" 2>&1 &
grpc_pid=$!
code=$(curl -s -o "$work/cold.json" -w '%{http_code}' --max-time 90 "$gateway/v1/completions" \
  -H 'content-type: application/json' \
  -d '{"model":"exa-tiny-arith","prompt":"12+30=","max_tokens":4,"temperature":0}')
cold_s=$(python3 -c "import sys,time; print(round(time.time() - float(sys.argv[1]), 1))" "$started")
[ "$code" = 200 ] && grep -q '"choices"' "$work/cold.json" ||
  fail "the request to a model at zero: $code $(cat "$work/cold.json") $(cli --addr "$sched" autoscale status tiny)"
wait "$grpc_pid" && [ -s "$work/cold-grpc.out" ] ||
  fail "the gRPC stream to a model at zero: $(cat "$work/cold-grpc.out")"
# The scheduler times the scale-up on its next control step: wait for it rather than read once.
timed_from_zero() {
  cli --addr "$sched" autoscale status tiny >"$work/status.txt" &&
    grep -q "scale from zero" "$work/status.txt" &&
    grep -q "Scale-up:   the last, to 1 replicas" "$work/status.txt"
}
wait_for 10 timed_from_zero ||
  fail "no scale-from-zero decision or its time to ready: $(cat "$work/status.txt")"
curl -s "$gateway/metrics" | has '^exaserve_gateway_activations_total{outcome="served"} [2-9]' ||
  fail "the held requests are not counted as served: $(curl -s "$gateway/metrics" | grep activation)"
echo "ok: scaled to zero when idle; a completion to the model waited ${cold_s}s for a replica and was answered, and a gRPC stream sent beside it streamed to its end"
