#!/usr/bin/env bash
# An elected observer observes, and another takes over when it dies (through
# election). A pinned inference seed and four auto nodes with gossip.nodes_per_observer = 4:
# the election names one auto node observer; it scrapes every member and answers `alerts` (asked
# through any node). kill -9 of it: the remaining view elects another, which starts observing.
source "$(dirname "$0")/lib.sh"
BIN=$1
CLI="$BIN/exaserve-cli"
work=$(mktemp -d)
trap 'kill_nodes; rm -rf "$work"' EXIT
export EXASERVE_GOSSIP_ELECTION_HOLD_DOWN=1s EXASERVE_GOSSIP_NODES_PER_OBSERVER=4 \
  EXASERVE_INFERENCE_THREADS=1 EXASERVE_OBSERVER_SCRAPE_INTERVAL=1s

start_node 0 --role inference
seed="127.0.0.1:$(port_of 0 gossip_port)"
for n in 1 2 3 4; do start_node $n --join "$seed"; done
addr0="127.0.0.1:$(port_of 0 grpc_port)"

observer_of() {  # the one alive observer node 0 sees among LIVE members, or ""
  "$CLI" --addr "$addr0" --json members | python3 -c '
import json, sys
ms = [m for m in json.load(sys.stdin) if m["state"] == "alive"]
o = [m["node_id"] for m in ms if "observer" in m.get("roles", [])]
print(o[0] if len(ms) == int(sys.argv[1]) and len(o) == 1 else "")' "$1"
}
has_observer() { [ -n "$(observer_of "$1")" ]; }
node_of() { for n in 1 2 3 4; do if [ "$(port_of $n node_id)" = "$1" ]; then echo $n; fi; done; }
observing() {  # observing ID TARGETS: alerts through node 0 come from ID, scraping TARGETS up
  "$CLI" --addr "$addr0" --json alerts >"$work/alerts.json" 2>"$work/alerts.err" || return 1
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["observer"] == sys.argv[2] and d["targets_up"] == int(sys.argv[3]), d' \
    "$work/alerts.json" "$1" "$2"
}

# While the views converge the named observer may change (a node that saw fewer members can name
# itself for a moment), so the observer is the one node 0 names AND whose alerts come back.
elected_observing() {  # elected_observing N: node 0 names one observer among N live, and it scrapes N
  local o; o=$(observer_of "$1")
  [ -n "$o" ] && observing "$o" "$1" && echo "$o" >"$work/observer"
}
wait_for 30 has_observer 5 || fail "no single elected observer among 5 live nodes"
wait_for 30 elected_observing 5 ||
  fail "elected observer $(observer_of 5) not observing: $(cat "$work/alerts.err" "$work/alerts.json" | tr -d "\n")"
first=$(cat "$work/observer"); n_first=$(node_of "$first")
[ -n "$n_first" ] || fail "the observer $first is not an auto node"
grep -q "elected observer: observing" "$work/n$n_first.log" || fail "no log line on node $n_first"
# While the views converge a node may name itself for a moment (each elects from its own view,
# after a 1 s hold-down here); once its view matches, it stops.
not_observing() {
  ! grep -E "elected observer: observing|no longer an elected observer" "$work/n$1.log" |
    tail -1 | has "elected observer: observing"
}
for n in 1 2 3 4; do
  if [ "$n" != "$n_first" ]; then
    wait_for 15 not_observing "$n" || fail "node $n still observes beside node $n_first"
  fi
done
echo "elected observer: node $n_first, scraping 5 targets"

kill -9 "${pids[$n_first]}"
wait_for 60 has_observer 4 || fail "no observer elected after the first died"
wait_for 30 elected_observing 4 ||
  fail "new observer $(observer_of 4) not observing: $(cat "$work/alerts.err" "$work/alerts.json" | tr -d "\n")"
second=$(cat "$work/observer"); n_second=$(node_of "$second")
[ "$second" != "$first" ] || fail "the dead observer is still named"
echo "after kill -9: node $n_second observes 4 targets"
echo PASS
