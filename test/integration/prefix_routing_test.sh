#!/usr/bin/env bash
# KV-aware routing with real processes (docs/architecture.md#routing): a gateway-only node and two
# inference nodes with two sim replicas each. Eight different long prompts are each sent twice;
# under kv-token-aware the repeat goes to the replica that cached the first copy (the gateway's
# prefix index follows the nodes' cached-block reports on their load streams), so the replicas'
# prefix-cache hits come near all that the repeats could hit. Blind placement lands a repeat on
# the right replica one time in four: round-robin on the same traffic is the control.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill_nodes; rm -rf "$work"' EXIT

# hits POLICY: prefix-cache hit tokens summed over both inference nodes after the traffic.
# Runs in this shell (its output redirected, not in a $(...) subshell), so the script's EXIT
# trap and the next call's kill_nodes see the nodes it starts in `pids`.
hits() {
  local policy=$1
  kill_nodes
  pids=()
  rm -rf "$work"/n*
  EXASERVE_GATEWAY_ROUTING_POLICY=$policy start_node 1 --role gateway
  local seed="127.0.0.1:$(port_of 1 gossip_port)"
  local n
  for n in 2 3; do
    EXASERVE_INFERENCE_BACKEND=sim EXASERVE_INFERENCE_KV_CACHE_BYTES=8Gi \
      EXASERVE_INFERENCE_REPLICAS_PER_MODEL=2 start_node $n --role inference --join "$seed"
  done
  local gw="http://127.0.0.1:$(port_of 1 http_port)"
  answers() {
    [ "$(curl -s "$gw/v1/completions" -d '{"prompt":"1+1=","max_tokens":1}' -o /dev/null \
      -w '%{http_code}')" = 200 ]
  }
  wait_for 20 answers || fail "$policy: the gateway never answered: $(tail -3 "$work/n1.log")"
  sleep 2  # both nodes' load streams open, every replica's cache snapshot in
  local p copy prompt
  for p in 1 2 3 4 5 6 7 8; do
    # ~190 characters, different from the first: 11 full 16-token blocks to share.
    prompt=$(python3 -c "import sys; p=int(sys.argv[1]); print(','.join(f'{p*7+i}+{i*3}={p*7+i*4}' for i in range(19)))" "$p")
    for copy in 1 2; do
      curl -s -o "$work/out" -w '%{http_code}' "$gw/v1/completions" \
        -d "{\"prompt\":\"$prompt\",\"max_tokens\":2}" | has 200 ||
        fail "$policy: prompt $p copy $copy: $(cat "$work/out")"
      sleep 0.8  # the first copy's blocks reach the gateway (deltas batched for 500 ms)
    done
  done
  routed_hits=$(curl -s "$gw/metrics" |
    awk '/^exaserve_gateway_routing_cache_hits_total/ {printf "%d", $2}')
  echo "$policy: the gateway counted $routed_hits decisions onto a cached prefix" >&2
  # The operator's view of the same counters (checked below).
  "$BIN/exaserve-cli" --addr "127.0.0.1:$(port_of 1 grpc_port)" --json routing \
    >"$work/routing-$policy.json" 2>&1 || true
  "$BIN/exaserve-cli" --addr "127.0.0.1:$(port_of 1 grpc_port)" routing >"$work/routing-$policy.txt" 2>&1 || true
  local hit=0 miss=0 v
  for n in 2 3; do
    curl -s "http://127.0.0.1:$(port_of $n http_port)/metrics" >"$work/m$n"
    v=$(awk '/^exaserve_replica_prefix_hit_tokens_total/ {s += $2} END {printf "%d", s}' "$work/m$n")
    hit=$((hit + v))
    v=$(awk '/^exaserve_replica_prefix_miss_tokens_total/ {s += $2} END {printf "%d", s}' "$work/m$n")
    miss=$((miss + v))
  done
  echo "$hit $miss $routed_hits"
}

hits kv-token-aware >"$work/hits-kv"
read -r kv kv_miss kv_routed <"$work/hits-kv"
hits round-robin >"$work/hits-rr"  # its nodes stay up for the bad-input checks below
read -r rr rr_miss rr_routed <"$work/hits-rr"
echo "prefix hit / miss tokens over 8 prompts sent twice: kv-token-aware $kv / $kv_miss," \
  "round-robin $rr / $rr_miss"
# The repeats are half the prompt tokens; each can hit all its full blocks (the last, partial
# block is computed again), so about 45 % of all tokens is the most there is to hit.
total=$((kv + kv_miss))
[ $((kv * 100)) -ge $((total * 35)) ] || fail "kv-token-aware hit only $kv of $total tokens"
[ "$kv" -gt $((2 * rr + 100)) ] || fail "kv-token-aware ($kv) is not well ahead of round-robin ($rr)"
# The gateway knew: every repeat was routed onto its cached prefix (round-robin asks no index).
[ "$kv_routed" -ge 8 ] || fail "kv-token-aware counted $kv_routed cache-hit decisions, not 8"
[ "$rr_routed" = 0 ] || fail "round-robin counted $rr_routed cache-hit decisions"
# exaserve-cli routing (docs/reference/cli.md) finds the gateway through membership and prints
# what its /metrics counted: its policy, the decisions onto cached prefixes, the prefix hit ratio.
check_routing() {  # POLICY ROUTED_HITS
  python3 - "$work/routing-$1.json" "$1" "$2" <<'PY' || fail "exaserve-cli routing, $1: $(cat "$work/routing-$1.json")"
import json, sys
d = json.load(open(sys.argv[1]))
policy, hits = sys.argv[2], int(sys.argv[3])
[g] = d["gateways"]
assert g["policy"] == policy, g
assert g["decisions"] >= 17, g  # the 16 prompts and the first answer waited for
assert g["cache_decisions"] == hits, g
assert g["ttft"]["count"] >= 16 and g["ttft"]["p50_seconds"] > 0, g
if policy == "kv-token-aware":
    assert g["prefix_hit_ratio"] > 0.3, g
else:
    assert g["prefix_hit_ratio"] == 0, g
[p] = d["by_policy"]
assert p["policy"] == policy and p["decisions"] == g["decisions"], p
PY
  grep -qE "^GATEWAY +METRICS +POLICY +DECISIONS" "$work/routing-$1.txt" &&
    grep -qE "^[0-9a-f-]+ +127\.0\.0\.1:[0-9]+ +$1 " "$work/routing-$1.txt" ||
    fail "exaserve-cli routing table, $1: $(cat "$work/routing-$1.txt")"
}
check_routing kv-token-aware "$kv_routed"
check_routing round-robin "$rr_routed"
# Bad input exits 2 saying what was wrong.
cli_routing() { "$BIN/exaserve-cli" --addr "127.0.0.1:$(port_of 1 grpc_port)" routing "$@"; }
set +e
out=$(cli_routing --gateway no-such-node 2>&1); rc=$?
set -e
[ "$rc" = 2 ] && grep -q 'no such live gateway' <<<"$out" || fail "routing --gateway no-such-node: $rc $out"
set +e
out=$(cli_routing --metrics not-an-address 2>&1); rc=$?
set -e
[ "$rc" = 2 ] && grep -q -- '--metrics "not-an-address"' <<<"$out" || fail "routing --metrics: $rc $out"
echo PASS
