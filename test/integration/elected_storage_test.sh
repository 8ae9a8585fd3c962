#!/usr/bin/env bash
# An elected storage node serves its rack (through election): the origin is pinned in
# rack "core"; three auto nodes in rack "r1" join it with weights.origin set and elect one of
# themselves r1's storage node. Pulls through any r1 node's membership view then come from that
# node's rack cache, and the origin serves the model once for the rack however many nodes pull.
source "$(dirname "$0")/lib.sh"
BIN=$1
CLI="$BIN/exaserve-cli"
work=$(mktemp -d)
trap 'kill_nodes; rm -rf "$work"' EXIT
export EXASERVE_GOSSIP_ELECTION_HOLD_DOWN=1s EXASERVE_INFERENCE_THREADS=1
model_dir=$(cd "$(dirname "$0")/../../models/exa-tiny-arith" && pwd)

"$CLI" model publish --dir "$model_dir" --name tiny --version v1 --origin "$work/origin" \
  >"$work/publish.out" 2>&1 || fail "publish: $(cat "$work/publish.out")"
start_node 0 --role storage --rack core --origin-dir "$work/origin"
seed="127.0.0.1:$(port_of 0 gossip_port)"
origin="127.0.0.1:$(port_of 0 grpc_port)"
for n in 1 2 3; do
  start_node $n --rack r1 --join "$seed" --origin "$origin" --cache-dir "$work/n$n/cache"
done

storage_of() {  # the r1 storage node node N believes in, once it sees all four members
  "$CLI" --addr "127.0.0.1:$(port_of "$1" grpc_port)" --json members | python3 -c '
import json, sys
ms = json.load(sys.stdin)
s = [m["node_id"] for m in ms if m["state"] == "alive" and m.get("rack") == "r1" and "storage" in m.get("roles", [])]
print(s[0] if len(ms) == 4 and len(s) == 1 else "")'
}
agreed() {
  local a b c
  a=$(storage_of 1); b=$(storage_of 2); c=$(storage_of 3)
  [ -n "$a" ] && [ "$a" = "$b" ] && [ "$b" = "$c" ]
}
wait_for 30 agreed || fail "r1 has no agreed storage node: $("$CLI" --addr "127.0.0.1:$(port_of 1 grpc_port)" members)"
storage_id=$(storage_of 1)
s=""; others=()
for n in 1 2 3; do
  if [ "$(port_of $n node_id)" = "$storage_id" ]; then s=$n; else others+=($n); fi
done
[ -n "$s" ] || fail "the elected storage node $storage_id is none of r1's nodes"
echo "elected r1 storage: node $s"
peer="127.0.0.1:$(port_of "$s" grpc_port)"

# Two pulls through the two other nodes' views: both from the elected node's rack cache.
for n in "${others[@]}"; do
  "$CLI" --addr "127.0.0.1:$(port_of "$n" grpc_port)" model pull --model tiny:v1 \
    --cache-dir "$work/pull$n" --origin "$origin" --json >"$work/pull$n.jsonl" 2>"$work/pull$n.err" ||
    fail "pull via node $n: $(cat "$work/pull$n.err")"
  grep -q "rack cache peer $peer (storage node $storage_id of rack \"r1\"" "$work/pull$n.err" ||
    fail "node $n did not name the elected peer: $(cat "$work/pull$n.err")"
  tail -1 "$work/pull$n.jsonl" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["bytes_by_tier"].get("rack-cache " + sys.argv[1]) == d["total_bytes"] > 0, d' "$peer" ||
    fail "pull via node $n did not come from the elected rack cache: $(tail -1 "$work/pull$n.jsonl")"
done
size=$(tail -1 "$work/pull${others[0]}.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total_bytes"])')
metric() { curl -s "http://127.0.0.1:$(port_of "$1" http_port)/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
[ "$(metric "$s" exaserve_weights_cache_upstream_bytes_total)" = "$size" ] ||
  fail "the elected cache fetched $(metric "$s" exaserve_weights_cache_upstream_bytes_total) bytes upstream, not $size once"
[ "$(metric "$s" exaserve_weights_cache_hits_total)" -gt 0 ] || fail "the second pull was no cache hit"
echo PASS
