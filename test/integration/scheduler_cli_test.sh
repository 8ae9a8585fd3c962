#!/usr/bin/env bash
# The scheduler's command lines as an operator runs them: `exaserve-cli plan` prints docs/architecture.md
# §3's arithmetic , `exaserve-sim cluster` brings a small cluster up,
# bad input exits 2 with a message naming the value, and against a one-node scheduler `get`
# shows resource versions that `apply` and `delete` may name (a stale one exits 1).
set -euo pipefail
BIN="$1"
ROOT="$2"
source "$(dirname "$0")/lib.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$BIN/exaserve-cli" plan --preset llama-2-13b --dtype fp16 --context 4096 --concurrency 4 \
  --gpu-memory 80Gi --gpus-per-node 8 --json >"$work/plan.json"
python3 - "$work/plan.json" <<'PY' || fail "plan figures"
import json, sys
p = json.load(open(sys.argv[1]))
checks = {
    "weights ≈ 26 GB": abs(p["weight_bytes"] / 1e9 - 26) < 0.5,
    "KV per token ≈ 0.8 MB": abs(p["kv_bytes_per_token"] / 1e6 - 0.8) < 0.05,
    "KV ≈ 13 GB": abs(p["kv_bytes"] / 1e9 - 13) < 0.5,
    "per replica ≈ 53 GB": abs(p["replica_bytes"] / 1e9 - 53) < 0.5,
    "12 replicas per node": p["replicas_per_node"] == 12,
}
bad = [k for k, ok in checks.items() if not ok]
if bad:
    print("plan:", bad, p)
    sys.exit(1)
PY
"$BIN/exaserve-cli" plan --preset llama-2-13b >"$work/plan.txt"
grep -q "replicas per node: 12" "$work/plan.txt" || fail "plan table: $(cat "$work/plan.txt")"
"$BIN/exaserve-cli" plan --model "$ROOT/models/exa-tiny-arith" --gpu-memory 1Gi >/dev/null ||
  fail "plan --model on the bundled model"

expect_usage() {  # expected-text command...
  local want="$1"; shift
  set +e
  "$@" >"$work/out" 2>&1
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "$* exited $rc, want 2: $(cat "$work/out")"
  grep -q -- "$want" "$work/out" || fail "$*: no \"$want\" in: $(cat "$work/out")"
}
expect_usage '"53Q"' "$BIN/exaserve-cli" plan --preset llama-2-13b --gpu-memory 53Q
expect_usage 'unknown; expected one of' "$BIN/exaserve-cli" plan --preset gpt-9
expect_usage 'exactly one of' "$BIN/exaserve-cli" plan

sed 's/replicas: 3072/replicas: 30/; s/batchSize: 512/batchSize: 10/; s/warmupReplicas: 256/warmupReplicas: 10/' \
  "$ROOT/config/specs/llama-13b.yaml" >"$work/spec.yaml"
"$BIN/exaserve-sim" cluster -f "$work/spec.yaml" --nodes 4 --racks 2 --seed 7 >"$work/sim.json"
python3 - "$work/sim.json" <<'PY' || fail "sim: $(cat "$work/sim.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["replicas_running"] == 30, r["replicas_running"]
assert [w["replicas"] for w in r["waves"]] == [10, 10, 10], r["waves"]
PY
sed 's/53Gi/53Q/' "$ROOT/config/specs/llama-13b.yaml" >"$work/bad.yaml"
expect_usage 'spec.resources.memory "53Q"' "$BIN/exaserve-sim" cluster -f "$work/bad.yaml"
expect_usage 'unknown flag' "$BIN/exaserve-sim" cluster -f "$work/spec.yaml" --nodez 3

# Optimistic concurrency against a real scheduler (one node, its own Raft log): get shows each
# spec's resource version; apply and delete naming a stale one exit 1 naming both versions and
# write nothing; the current one writes; a malformed --resource-version is a usage error.
start_daemon --role scheduler --node-id sched
trap 'kill -9 "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
export EXASERVE_NODE_DATA_DIR="$work/data"  # the admin token
cli() { "$BIN/exaserve-cli" --addr "$grpc" "$@"; }
version_of() { cli --json get web | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["resource_version"])'; }
expect_aborted() {  # expected-text command...: exit 1 and the text in the output
  local want="$1"; shift
  set +e
  "$@" >"$work/out" 2>&1
  local rc=$?
  set -e
  [ "$rc" -eq 1 ] || fail "$* exited $rc, want 1: $(cat "$work/out")"
  grep -q -- "$want" "$work/out" || fail "$*: no \"$want\" in: $(cat "$work/out")"
}
sed 's/replicas: 3072/replicas: 2/; s/name: llama-13b-replica/name: web/' \
  "$ROOT/config/specs/llama-13b.yaml" >"$work/web.yaml"
wait_for 30 cli apply -f "$work/web.yaml" || fail "apply: $(cli apply -f "$work/web.yaml" 2>&1)"
v1=$(version_of)
cli get | has -E "^web .* $v1\$" || fail "get shows no version $v1: $(cli get)"
cli get web -o yaml | has -x "  resourceVersion: $v1" || fail "get -o yaml: $(cli get web -o yaml)"
cli describe web | has "^Version: *$v1 " || fail "describe: $(cli describe web)"

sed 's/replicas: 2/replicas: 3/' "$work/web.yaml" >"$work/web3.yaml"
cli apply -f "$work/web3.yaml" --resource-version "$v1" >/dev/null || fail "apply at $v1"
v2=$(version_of)
[ "$v2" -gt "$v1" ] || fail "apply at $v1 left the version at $v2"
sed 's/replicas: 2/replicas: 4/' "$work/web.yaml" >"$work/web4.yaml"
expect_aborted "spec \"web\": resource version $v1 was named, but the store holds version $v2" \
  cli apply -f "$work/web4.yaml" --resource-version "$v1"
cli get web -o yaml | has "replicas: 3" || fail "a stale apply was written"
# kubectl's loop: get -o yaml, edit, apply; the same edited copy again is stale.
cli get web -o yaml | sed 's/replicas: 3/replicas: 5/' >"$work/edited.yaml"
cli apply -f "$work/edited.yaml" >/dev/null || fail "apply of the edited copy"
v3=$(version_of)
expect_aborted "resource version $v2 was named" cli apply -f "$work/edited.yaml"

expect_usage '--resource-version "abc"' cli apply -f "$work/web.yaml" --resource-version abc
expect_usage '--resource-version "abc"' cli delete web --resource-version abc
{ cat "$work/web.yaml"; echo "---"; sed 's/name: web/name: web2/' "$work/web.yaml"; } >"$work/two.yaml"
expect_usage 'holds 2' cli apply -f "$work/two.yaml" --resource-version "$v3"

expect_aborted "resource version $v1 was named, but the store holds version $v3" \
  cli delete web --resource-version "$v1"
cli get web >/dev/null || fail "a stale delete deleted"
cli delete web --resource-version "$v3" >/dev/null || fail "delete at $v3"
expect_aborted "no spec named web" cli get web
echo "scheduler CLI: ok"
