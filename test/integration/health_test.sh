#!/usr/bin/env bash
# Model-level health: a replica that answers its probe stays in routing; one whose answer is
# wrong (here: the probe expects "3" for "1+1=") is taken out of routing, so requests get a clear
# 503 instead of wrong answers, and /metrics says why.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT

run_node() {  # run_node EXPECT
  rm -rf "$work/data"
  EXASERVE_HEALTH_MODEL_INTERVAL=1s EXASERVE_HEALTH_PROBE_TIMEOUT=500ms \
    EXASERVE_HEALTH_PROBE_EXPECT="$1" start_daemon
}
at_least() { [ "$(probes "$1")" -ge "$2" ]; }  # at_least RESULT N
probes() { curl -s "$http/metrics" | awk -v r="result=\"$1\"" 'index($0, "exaserve_replica_probes_total") == 1 && index($0, r) {s += $2} END {print s + 0}'; }

run_node 2
wait_for 10 at_least ok 2 || fail "healthy replica: probes ok = $(probes ok)"
code=$(curl -s -o /dev/null -w '%{http_code}' "$http/v1/completions" -d '{"prompt":"1+1="}')
[ "$code" = 200 ] || fail "healthy replica refused: $code"
kill -TERM $pid; wait $pid

run_node 3
wait_for 10 at_least failed 1 || fail "wrong answer not caught"
grep -q '^exaserve_replica_healthy{replica=".*"} 0' <<<"$(curl -s "$http/metrics")" || fail "healthy gauge"
grep -q 'answered \\"2\\", expected \\"3\\"' "$work/log" || fail "reason not logged"
code=$(curl -s -o "$work/body" -w '%{http_code}' "$http/v1/completions" -d '{"prompt":"1+1="}')
[ "$code" = 503 ] && grep -q "no ready and healthy replica" "$work/body" ||
  fail "unhealthy replica still routed: $code $(cat "$work/body")"
kill -TERM $pid; wait $pid
pid=
echo "health: ok"
