#!/usr/bin/env bash
# Five real exaserved processes on loopback form one encrypted cluster: all see five alive within
# 5 s; a kill -9 is declared dead within 15 s; a restart with the same data dir rejoins with a
# higher incarnation; a node with the wrong key is never admitted and bumps the decrypt-failure
# counter; the key rotates (install, use, remove) on every node with no false deaths.
source "$(dirname "$0")/lib.sh"
BIN=$1
CLI="$BIN/exaserve-cli"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

key1=$("$CLI" gossip keygen)
key2=$("$CLI" gossip keygen)
echo "$key1" > "$work/key1"
echo "$(  "$CLI" gossip keygen)" > "$work/wrong"

launch_node() {  # launch_node N [--join ADDR] ; sets pids[N], does not wait
  local n=$1; shift
  rm -f "$work/n$n/endpoints.json"
  "$BIN/exaserved" --data-dir "$work/n$n" --bind 127.0.0.1 --http-port 0 --grpc-port 0 \
    --gossip-port 0 --gossip-key-file "${KEY_FILE:-$work/key1}" "$@" >>"$work/n$n.log" 2>&1 &
  pids[$n]=$!
}
wait_started() {  # wait_started N
  wait_for 10 test -s "$work/n$1/endpoints.json" || { cat "$work/n$1.log"; fail "node $1 did not start"; }
}
start_node() { launch_node "$@"; wait_started "$1"; }
grpc_of() { json_field "$work/n$1/endpoints.json" grpc_port; }
http_of() { json_field "$work/n$1/endpoints.json" http_port; }
count_state() {  # count_state NODE STATE
  "$CLI" --addr "127.0.0.1:$(grpc_of "$1")" --json members |
    python3 -c "import json,sys; print(sum(m['state']==sys.argv[1] for m in json.load(sys.stdin)))" "$2"
}
all_see() {  # all_see STATE COUNT NODES...
  local state=$1 want=$2; shift 2
  for n in "$@"; do [ "$(count_state "$n" "$state")" = "$want" ] || return 1; done
}
dump_views() {  # dump_views NODES...: each node's member view and its last gossip log lines
  for n in "$@"; do
    echo "--- node $n members:" >&2
    "$CLI" --addr "127.0.0.1:$(grpc_of "$n")" members >&2 || true
    echo "--- node $n log (membership):" >&2
    grep '"membership"' "$work/n$n.log" | tail -8 >&2 || true
  done
}
member_field() {  # member_field OBSERVER NODE_ID FIELD
  "$CLI" --addr "127.0.0.1:$(grpc_of "$1")" --json members |
    python3 -c "import json,sys; print([m[sys.argv[2]] for m in json.load(sys.stdin) if m['node_id']==sys.argv[1]][0])" "$2" "$3"
}

start_node 1
seed="127.0.0.1:$(json_field "$work/n1/endpoints.json" gossip_port)"
# The clock starts when the four joiners are launched together, process start-up included.
t0=$(date +%s%N)
for n in 2 3 4 5; do launch_node $n --join "$seed"; done
for n in 2 3 4 5; do wait_started $n; done
wait_for 5 all_see alive 5 1 2 3 4 5 || fail "not all five nodes see five alive within 5 s"
echo "converged: five alive everywhere after $(( ($(date +%s%N) - t0) / 1000000 )) ms"

# A node with the wrong key is never admitted, and the others count what they could not open.
KEY_FILE="$work/wrong" start_node 6 --join "$seed"
sleep 3
for n in 1 2 3 4 5; do
  [ "$(count_state $n alive)" = 5 ] || fail "node $n admitted the wrong-key node"
done
failures=$(curl -s "http://127.0.0.1:$(http_of 1)/metrics" |
  awk '/^exaserve_gossip_decrypt_failures_total/ {print $2}')
[ "${failures:-0}" -gt 0 ] || fail "decrypt failures did not rise (got ${failures:-none})"
kill -9 "${pids[6]}"
echo "wrong key: not admitted, decrypt failures on node 1 = $failures"

# Key rotation on every node: install, use, remove — no false deaths on the way.
for n in 1 2 3 4 5; do "$CLI" --addr "127.0.0.1:$(grpc_of $n)" gossip key install "$key2" >/dev/null; done
for n in 1 2 3 4 5; do "$CLI" --addr "127.0.0.1:$(grpc_of $n)" gossip key use "$key2" >/dev/null; done
sleep 2
for n in 1 2 3 4 5; do "$CLI" --addr "127.0.0.1:$(grpc_of $n)" gossip key remove "$key1" >/dev/null; done
sleep 4
all_see alive 5 1 2 3 4 5 || fail "rotation caused a false suspicion or death"
for n in 1 2 3 4 5; do
  [ "$(count_state $n suspect)" = 0 ] && [ "$(count_state $n dead)" = 0 ] ||
    fail "node $n saw a suspect or dead member during rotation"
done
keys=$("$CLI" --addr "127.0.0.1:$(grpc_of 3)" gossip key list)
[ "$(wc -l <<<"$keys")" = 1 ] && grep -q "$key2" <<<"$keys" || fail "keyring after rotation: $keys"
echo "key rotation: no false deaths"
echo "$key2" > "$work/key1"  # restarts below use the new key

# kill -9 → dead within 15 s on every other node.
victim_id=$(cat "$work/n5/node_id")
old_incarnation=$(member_field 1 "$victim_id" incarnation)
kill -9 "${pids[5]}"
t0=$(date +%s%N)
wait_for 15 all_see dead 1 1 2 3 4 || { dump_views 1 2 3 4; fail "kill -9 not declared dead within 15 s"; }
echo "dead after $(( ($(date +%s%N) - t0) / 1000000 )) ms"

# Restart with the same data dir: same id, higher incarnation, alive again.
start_node 5 --join "$seed"
wait_for 10 all_see alive 5 1 2 3 4 5 || { dump_views 1 2 3 4 5; fail "restarted node not alive everywhere"; }
new_incarnation=$(member_field 1 "$victim_id" incarnation)
[ "$new_incarnation" -gt "$old_incarnation" ] ||
  fail "incarnation did not rise: $old_incarnation -> $new_incarnation"
echo "restart: same id, incarnation $old_incarnation -> $new_incarnation"

for n in 1 2 3 4 5; do kill -TERM "${pids[$n]}"; done
for n in 1 2 3 4 5; do wait "${pids[$n]}" || fail "node $n exit code $?"; done
pids=()
echo "gossip cluster: ok"
