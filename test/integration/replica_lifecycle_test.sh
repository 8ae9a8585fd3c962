#!/usr/bin/env bash
# The node agent's replica lifecycle on a real daemon (what the scheduler will drive):
# StartReplica brings a second version of the bundled model up (pending → loading → warming →
# ready) and into routing; the memory ledger refuses a replica that does not fit, naming the
# numbers; StopReplica drains a replica out of routing while the other keeps serving; a bad
# request is a usage error; states show in `exaserve-cli replicas` and /metrics.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
cli() { "$BIN/exaserve-cli" --addr "$grpc" "$@"; }
complete() {
  curl -s -o "$work/body" -w '%{http_code}' --max-time 10 "$http/v1/completions" \
    -d '{"model":"exa-tiny-arith","prompt":"12+30=","max_tokens":4,"temperature":0}'
}

EXASERVE_INFERENCE_KV_CACHE_BYTES=8Mi EXASERVE_INFERENCE_HOST_MEMORY_BUDGET=256Mi \
  EXASERVE_INFERENCE_THREADS=1 start_daemon
model_dir=$(python3 -c "import os,sys; print(os.path.realpath(sys.argv[1]))" \
  "$(dirname "$0")/../../models/exa-tiny-arith")
v1=$(cli --json replicas | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['replica_id'])")

cli replica start --model "$model_dir@v2" --label track=canary --wait >"$work/start.out" ||
  fail "replica start: $(cat "$work/start.out") $(tail -5 "$work/log")"
grep -q ': ready' "$work/start.out" || fail "not ready: $(cat "$work/start.out")"
v2=$(awk '{print $2}' "$work/start.out" | tr -d :)
[ "$(cli --json replicas | python3 -c "import json,sys; print(sum(r['state']=='ready' for r in json.load(sys.stdin)))")" = 2 ] ||
  fail "two ready replicas expected: $(cli replicas)"

# The ledger: a budget that cannot fit is refused before anything loads (exit 1, the numbers).
set +e
cli replica start --model "$model_dir@v3" --memory-budget 10Gi >"$work/big.out" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || fail "an over-committing replica: exit $rc $(cat "$work/big.out")"
grep -q 'host memory: .* needs 10Gi but only .* are free' "$work/big.out" ||
  fail "ledger message: $(cat "$work/big.out")"
# Bad input: a usage error naming the field.
set +e
cli replica start --model /nonexistent/model >"$work/bad.out" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || fail "a missing model dir: exit $rc $(cat "$work/bad.out")"
grep -q 'model_dir' "$work/bad.out" || fail "bad-input message: $(cat "$work/bad.out")"

# Stop the config replica (drain): the started one serves alone.
cli replica stop "$v1" --wait >"$work/stop1.out" || fail "stop v1: $(cat "$work/stop1.out")"
grep -q ': stopped' "$work/stop1.out" || fail "v1 not stopped: $(cat "$work/stop1.out")"
ready_v2() { [ "$(complete)" = 200 ]; }
wait_for 5 ready_v2 || fail "the started replica does not serve: $(cat "$work/body")"
grep -q '"text":"42"' "$work/body" || fail "answer: $(cat "$work/body")"

# Stop it too (immediate): nothing serves, requests get a clear error, the node stays up.
cli replica stop "$v2" --now --wait >/dev/null || fail "stop v2"
no_replica() { code=$(complete); [ "$code" = 503 ] || [ "$code" = 404 ]; }
wait_for 5 no_replica || fail "with no replica: HTTP $(complete) $(cat "$work/body")"
two_stopped() { grep -q '^exaserve_replicas{state="stopped"} 2' <<<"$(curl -s "$http/metrics")"; }
wait_for 5 two_stopped || fail "metrics: $(curl -s "$http/metrics" | grep exaserve_replicas)"
cli replicas | has -E "^$v1 .* stopped " || fail "listing: $(cli replicas)"
echo "ok: $v2 started and served, the ledger refused 10Gi, both stopped cleanly"
