#!/usr/bin/env bash
# The cuda backend where a replica cannot get its GPU (on a machine without one, or a GPU index
# that does not exist): the node starts and stays up, each replica is listed as failed with the
# CUDA reason, requests get a clear error instead of a hang, and `exaserve-cli node burn-in`
# explains why there is nothing to burn in (exit 1). On a machine with 8+ GPUs the replicas
# start on GPU 7 and the test only checks that the node serves.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT

EXASERVE_INFERENCE_BACKEND=cuda EXASERVE_INFERENCE_GPUS=7 \
  EXASERVE_INFERENCE_KV_CACHE_BYTES=8Mi start_daemon
curl -sf "$http/readyz" >/dev/null || fail "the node is not ready: $(cat "$work/log")"

"$BIN/exaserve-cli" --addr "$grpc" --json replicas >"$work/replicas.json" ||
  fail "replicas: $(cat "$work/replicas.json")"
state=$(python3 -c "
import json,sys
rs = json.load(open(sys.argv[1]))
print(' '.join(sorted({r['state'] for r in rs})))" "$work/replicas.json")
if [ "$state" = ready ]; then
  echo "this machine has 8+ GPUs: the replica serves on GPU 7"
  exit 0
fi
[ "$state" = failed ] || fail "replica states: $state ($(cat "$work/replicas.json"))"
grep -q 'GPU 7: FAILED_PRECONDITION' "$work/replicas.json" ||
  fail "the failed replica does not say why: $(cat "$work/replicas.json")"
grep -q '"replica failed to start"' "$work/log" || fail "no log line for the failed replica"

# A request: a clear error naming the model, not a hang or a crash.
code=$(curl -s -o "$work/body" -w '%{http_code}' --max-time 10 "$http/v1/completions" \
  -d '{"prompt":"1+1=","max_tokens":4}')
case "$code" in 404 | 503) ;; *) fail "completion with no replica: HTTP $code $(cat "$work/body")" ;; esac
grep -q '"error"' "$work/body" || fail "no JSON error body: $(cat "$work/body")"
curl -sf "$http/healthz" >/dev/null || fail "the node went down"

# Burn-in with no GPU: exit 1 and the reason.
set +e
"$BIN/exaserve-cli" --addr "$grpc" node burn-in >"$work/burn.out" 2>"$work/burn.err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "node burn-in exit $rc: $(cat "$work/burn.out" "$work/burn.err")"
grep -q "no GPU to burn in" "$work/burn.err" || fail "burn-in message: $(cat "$work/burn.err")"
echo "ok: failed replicas listed with the CUDA reason, HTTP $code for requests, node up"
