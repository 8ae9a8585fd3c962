#!/usr/bin/env bash
# scripts/local-cluster.sh: `up 5` starts five real nodes, applies the spec
# and waits for its replicas; the gateway answers; `status` shows them; `down` stops every node.
source "$(dirname "$0")/lib.sh"
BIN=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
export CLUSTER_DIR BASE_PORT BIN
CLUSTER_DIR=$(mktemp -d)
BASE_PORT=$((20000 + ($$ % 1200) * 10))  # below the ephemeral range (32768+)
trap '"$root/scripts/local-cluster.sh" down >/dev/null 2>&1 || true; rm -rf "$CLUSTER_DIR"' EXIT
"$root/scripts/local-cluster.sh" up 5 >"$CLUSTER_DIR/up.out" 2>&1 ||
  fail "up: $(cat "$CLUSTER_DIR/up.out")"
grep -q "local-tiny: 3 of 3 replicas ready" "$CLUSTER_DIR/up.out" || fail "$(cat "$CLUSTER_DIR/up.out")"
curl -s --max-time 10 "http://127.0.0.1:$((BASE_PORT + 11))/v1/completions" \
  -d '{"model":"exa-tiny-arith","prompt":"12+30=","max_tokens":4,"temperature":0}' |
  grep -q '"text":"42"' || fail "no answer through the gateway"
"$root/scripts/local-cluster.sh" status >"$CLUSTER_DIR/status.out" 2>&1 || fail "status: $(cat "$CLUSTER_DIR/status.out")"
grep -q "3 ready, 3 present, 3 desired" "$CLUSTER_DIR/status.out" || fail "status: $(cat "$CLUSTER_DIR/status.out")"
grep -q "observer node-1" "$CLUSTER_DIR/status.out" || fail "no observer: $(cat "$CLUSTER_DIR/status.out")"
"$root/scripts/local-cluster.sh" down | has "stopped 5 nodes" || fail "down"
for i in 1 2 3 4 5; do
  ! curl -sf "http://127.0.0.1:$((BASE_PORT + 10 * i + 1))/healthz" >/dev/null 2>&1 ||
    fail "node $i still up after down"
done
echo "ok: local cluster of 5 up, serving, listed and down"
