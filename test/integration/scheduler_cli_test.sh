#!/usr/bin/env bash
# The scheduler's command lines as an operator runs them: `exaserve-cli plan` prints docs/architecture.md
# §3's arithmetic , `exaserve-sim cluster` brings a small cluster up, and
# bad input exits 2 with a message naming the value.
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
echo "scheduler CLI: ok"
