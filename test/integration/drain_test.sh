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

# Streams the client gave up on (its deadline passed mid-stream) are finished on the server: they
# once never were, so every one leaked and SIGTERM waited for them for ever.
rm -f "$work/data/endpoints.json"
EXASERVE_INFERENCE_BACKEND=sim EXASERVE_INFERENCE_KV_CACHE_BYTES=8Gi start_daemon
for i in 1 2 3 4 5 6; do
  set +e
  "$BIN/exaserve-cli" --addr "$grpc" --timeout "$(( 100 * i ))ms" generate --prompt "1+1=" \
    --max-tokens 200 >"$work/gen$i" 2>&1
  rc=$?
  set -e
  [ "$rc" = 1 ] && grep -qi deadline "$work/gen$i" || fail "stream $i past its deadline: exit $rc: $(cat "$work/gen$i")"
done
start=$(date +%s%N)
kill -TERM $pid
for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -0 $pid 2>/dev/null && fail "SIGTERM after 6 abandoned streams: still running after 10 s"
wait $pid || fail "exit code $? after 6 abandoned streams"
pid=
echo "drain: ok (6 abandoned streams, exit 0 in $(( ($(date +%s%N) - start) / 1000000 )) ms)"
