#!/usr/bin/env bash
# StartReplica by model name (issues #6 and #7 together): the node pulls the model through its
# cache from the origin (every chunk verified), then loads, warms up and serves it. An unknown
# model ends the replica `failed` with the reason; the node keeps serving.
source "$(dirname "$0")/lib.sh"
BIN=$1
root=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$root"' EXIT
cli() { "$BIN/exaserve-cli" "$@"; }
model_dir=$(cd "$(dirname "$0")/../../models/exa-tiny-arith" && pwd)

cli model publish --dir "$model_dir" --name exa-tiny-arith --version v7 --origin "$root/origin" \
  --json >"$root/publish.json" || fail "publish: $(cat "$root/publish.json")"
mkdir -p "$root/o" "$root/n"
work=$root/o start_daemon --role storage --origin-dir "$root/origin"
pids+=("$pid"); origin=$grpc
work=$root/n EXASERVE_INFERENCE_THREADS=1 EXASERVE_INFERENCE_KV_CACHE_BYTES=8Mi start_daemon \
  --role inference,gateway --origin "$origin" --cache-dir "$root/n/cache"
pids+=("$pid"); node=$grpc; node_http=$http
bundled=$(cli --addr "$node" --json replicas |
  python3 -c "import json,sys; print(json.load(sys.stdin)[0]['replica_id'])")

cli --addr "$node" replica start --pull exa-tiny-arith:v7 --wait >"$root/start.out" 2>&1 ||
  fail "replica start --pull: $(cat "$root/start.out") $(grep -E 'weights|replica' "$root/n/log" | tail -5)"
grep -q 'exa-tiny-arith@v7#0: ready' "$root/start.out" || fail "not ready: $(cat "$root/start.out")"
cmp "$model_dir/model.safetensors" "$root/n/cache/exa-tiny-arith/v7/model.safetensors" ||
  fail "the node cache does not hold the pulled weights"
grep -q '"pulled for a replica"' "$root/n/log" || fail "no pull logged"

# Only the pulled replica left: it answers.
cli --addr "$node" replica stop "$bundled" --wait >/dev/null || fail "stop $bundled"
answer() {
  curl -s -o "$root/body" -w '%{http_code}' --max-time 10 "$node_http/v1/completions" \
    -d '{"model":"exa-tiny-arith","prompt":"12+30=","max_tokens":4,"temperature":0}' | has 200
}
wait_for 5 answer || fail "the pulled replica does not serve: $(cat "$root/body")"
grep -q '"text":"42"' "$root/body" || fail "answer: $(cat "$root/body")"

# A model the store does not have: the replica fails with the reason, the node serves on.
set +e
cli --addr "$node" replica start --pull no-such-model:v1 --wait >"$root/missing.out" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || fail "an unknown model: exit $rc $(cat "$root/missing.out")"
grep -q 'no-such-model@v1#0: failed (NOT_FOUND' "$root/missing.out" ||
  fail "failure reason: $(cat "$root/missing.out")"
answer || fail "the node stopped serving after a failed pull"
echo "ok: pulled exa-tiny-arith:v7 from the origin, served it; an unknown model failed cleanly"
