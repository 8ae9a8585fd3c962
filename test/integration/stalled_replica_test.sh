#!/usr/bin/env bash
# A replica whose step loop hangs (the sim backend's stall drill) fails its model probe and is out
# of routing within two model-probe intervals: new requests get a prompt 503 naming the reason
# instead of hanging behind it. When the loop moves again the replica returns to routing.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'rm -f "$work/stall"; kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT

EXASERVE_INFERENCE_BACKEND=sim EXASERVE_INFERENCE_KV_CACHE_BYTES=8Gi \
  EXASERVE_INFERENCE_SIM_STALL_FILE="$work/stall" \
  EXASERVE_HEALTH_MODEL_INTERVAL=2s EXASERVE_HEALTH_PROBE_TIMEOUT=500ms start_daemon

code() { curl -s -o "$work/body" -w '%{http_code}' --max-time 5 "$http/v1/completions" -d '{"prompt":"1+1=","max_tokens":2}' || true; }
serving() { [ "$(code)" = 200 ]; }
wait_for 10 serving || fail "not serving: $(cat "$work/body")"

touch "$work/stall"
t0=$(date +%s%N)
out_of_routing() { [ "$(curl -s "$http/metrics" | awk '/^exaserve_replica_healthy\{/ {print $2}')" = 0 ]; }
wait_for 8 out_of_routing || fail "the stalled replica stayed in routing"
elapsed_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$elapsed_ms" -le 4000 ] || fail "out of routing after ${elapsed_ms} ms, more than 2 probe intervals (4 s)"
[ "$(code)" = 503 ] || fail "a request while stalled: $(cat "$work/body")"
grep -q "no ready and healthy replica" "$work/body" || fail "503 without the reason: $(cat "$work/body")"
listed=$("$BIN/exaserve-cli" --addr "$grpc" replicas)
grep -q "unhealthy .*not answered within 500ms" <<<"$listed" || fail "exaserve-cli replicas: $listed"

rm -f "$work/stall"
wait_for 10 serving || { grep -E "health|probe" "$work/log" | tail -5; fail "the replica did not come back after the stall: $(cat "$work/body")"; }
"$BIN/exaserve-cli" --addr "$grpc" --json replicas | has '"state":"ready"' || fail "not ready again in exaserve-cli replicas"
echo "stalled replica: out of routing after ${elapsed_ms} ms, back after the stall"
