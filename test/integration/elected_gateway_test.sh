#!/usr/bin/env bash
# Three auto nodes (no --role): the election picks one gateway; every node agrees which. The
# elected gateway answers through replicas on all three nodes; the others refuse with a 503 that
# says they are not the gateway, and watch no load streams.
source "$(dirname "$0")/lib.sh"
BIN=$1
CLI="$BIN/exaserve-cli"
work=$(mktemp -d)
trap 'kill_nodes; rm -rf "$work"' EXIT
export EXASERVE_GOSSIP_ELECTION_HOLD_DOWN=1s EXASERVE_INFERENCE_THREADS=1

start_node 1
seed="127.0.0.1:$(port_of 1 gossip_port)"
start_node 2 --join "$seed"
start_node 3 --join "$seed"

gateway_of() {  # the node id node N believes is the (single) gateway
  "$CLI" --addr "127.0.0.1:$(port_of "$1" grpc_port)" --json members | python3 -c '
import json, sys
ms = json.load(sys.stdin)
gws = [m["node_id"] for m in ms if m["state"] == "alive" and "gateway" in m.get("roles", [])]
print(gws[0] if len(ms) == 3 and len(gws) == 1 else "")'
}
agreed() {
  local g1 g2 g3
  g1=$(gateway_of 1); g2=$(gateway_of 2); g3=$(gateway_of 3)
  [ -n "$g1" ] && [ "$g1" = "$g2" ] && [ "$g2" = "$g3" ]
}
wait_for 20 agreed || fail "the three nodes do not agree on one gateway"
gw_id=$(gateway_of 1)
gw=""; others=()
for n in 1 2 3; do
  if [ "$(json_field "$work/n$n/endpoints.json" node_id)" = "$gw_id" ]; then gw=$n; else others+=($n); fi
done
[ -n "$gw" ] || fail "the elected gateway $gw_id is none of the three nodes"
echo "elected gateway: node $gw"

post() { curl -s -o "$work/body" -w '%{http_code}' "http://127.0.0.1:$(port_of "$1" http_port)/v1/completions" -d '{"prompt":"1+1=","max_tokens":2}'; }
watching() { [ "$(curl -s "http://127.0.0.1:$(port_of "$gw" http_port)/metrics" | awk '/^exaserve_gateway_watched_nodes / {print $2}')" = 2 ]; }
wait_for 15 watching || fail "the gateway does not watch the other two nodes"
[ "$(post "$gw")" = 200 ] || fail "the elected gateway: $(cat "$work/body")"
for n in "${others[@]}"; do
  [ "$(post "$n")" = 503 ] || fail "node $n is not the gateway but answered: $(cat "$work/body")"
  grep -q "not an elected gateway" "$work/body" || fail "node $n refused without saying why: $(cat "$work/body")"
  watched=$(curl -s "http://127.0.0.1:$(port_of "$n" http_port)/metrics" | awk '/^exaserve_gateway_watched_nodes / {print $2}')
  [ "$watched" = 0 ] || fail "node $n is not the gateway but watches $watched load streams"
done
echo "elected gateway: ok"
