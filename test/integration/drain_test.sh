#!/usr/bin/env bash
# SIGTERM under load: requests already admitted run to completion, new ones are refused, and the
# daemon exits 0. The sim backend (13B-on-A100 timing, ~20 ms a token) keeps requests in flight
# long enough to be caught by the signal.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT

EXASERVE_INFERENCE_BACKEND=sim EXASERVE_INFERENCE_KV_CACHE_BYTES=8Gi start_daemon

for i in 1 2 3 4; do
  curl -s -o "$work/r$i" -w '%{http_code}' "$http/v1/completions" \
    -d '{"prompt":"1+1=","max_tokens":100}' >"$work/code$i" &
done
admitted() {  # all four are running or queued on the replica
  curl -s "$http/metrics" | awk '/^exaserve_replica_(running|waiting)_sequences\{/ {s += $2} END {exit !(s == 4)}'
}
wait_for 10 admitted || fail "the four requests were not admitted"
kill -TERM $pid
sleep 0.2
new=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$http/v1/completions" -d '{"prompt":"1+1="}' || true)
[ "$new" != 200 ] || fail "a new request was admitted while draining"
wait $pid || fail "exit code $? after draining"
pid=
wait  # the four clients
for i in 1 2 3 4; do
  [ "$(cat "$work/code$i")" = 200 ] || fail "in-flight request $i: $(cat "$work/code$i") $(cat "$work/r$i")"
  grep -q '"completion_tokens":100' "$work/r$i" || fail "request $i cut short: $(cat "$work/r$i")"
done
grep -q '"msg":"draining","in_flight":4' "$work/log" || fail "drain did not see 4 in flight"
echo "drain: ok (4 in-flight completed, new request got ${new:-refused})"
