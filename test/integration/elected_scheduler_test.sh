#!/usr/bin/env bash
# Elected schedulers schedule (docs/architecture.md#roles: control roles pinned or elected). A pinned
# storage+gateway seed (the origin) and four auto CPU inference nodes: the election names three
# of the auto nodes schedulers (3 is the minimum), each starts its control loop, and the fourth
# answers Scheduler calls with UNAVAILABLE naming them. `apply` through one elected scheduler →
# replicas placed by the elected reconciler, ready, and a request answered through the gateway.
# kill -9 of the reconciler: the remaining view elects the fourth node, which repairs its empty
# spec store from the two survivors, and the deployment is whole again.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill_nodes; rm -rf "$work"' EXIT
cli() { "$BIN/exaserve-cli" "$@"; }
model_dir=$(cd "$(dirname "$0")/../../models/exa-tiny-arith" && pwd)
export EXASERVE_GOSSIP_ELECTION_HOLD_DOWN=1s EXASERVE_SCHEDULER_RECONCILE_INTERVAL=500ms

cli model publish --dir "$model_dir" --name exa-tiny-arith --version v1 --origin "$work/origin" \
  --json >/dev/null || fail "publish"
start_node 1 --role storage,gateway --origin-dir "$work/origin" --node-id seed
seed="127.0.0.1:$(port_of 1 gossip_port)"
origin="127.0.0.1:$(port_of 1 grpc_port)"
for n in 2 3 4 5; do
  EXASERVE_INFERENCE_REPLICAS_PER_MODEL=0 EXASERVE_INFERENCE_HOST_MEMORY_BUDGET=4Gi \
    EXASERVE_INFERENCE_THREADS=1 EXASERVE_INFERENCE_KV_CACHE_BYTES=8Mi \
    start_node $n --join "$seed" --origin "$origin" --node-id "auto-$n"
done
addr() { echo "127.0.0.1:$(port_of "$1" grpc_port)"; }
node_of() { echo "${1#auto-}"; }

schedulers_seen() {  # schedulers_seen N: the scheduler ids node 1 sees once N members are alive
  cli --addr "$(addr 1)" --json members | python3 -c '
import json, sys
ms = [m for m in json.load(sys.stdin) if m["state"] == "alive"]
s = sorted(m["node_id"] for m in ms if "scheduler" in m.get("roles", []))
print(" ".join(s) if len(ms) == int(sys.argv[1]) and len(s) == 3 else "")' "$1"
}
three_schedulers() { [ -n "$(schedulers_seen "$1")" ]; }
scheduling() {  # the node's last scheduler log line says it schedules
  grep -E "elected scheduler: scheduling|no longer an elected scheduler" "$work/n$1.log" |
    tail -1 | has "elected scheduler: scheduling"
}
not_scheduling() { ! scheduling "$1"; }

wait_for 40 three_schedulers 5 || fail "no 3 elected schedulers among 5 live nodes: $(cli --addr "$(addr 1)" members)"
elected=$(schedulers_seen 5)
spare=""
for n in 2 3 4 5; do
  case " $elected " in
    *" auto-$n "*) wait_for 20 scheduling "$n" || fail "auto-$n elected but not scheduling: $(tail -5 "$work/n$n.log")" ;;
    *) spare=$n ;;
  esac
done
[ -n "$spare" ] || fail "the seed was elected a scheduler: $elected"
# Each node elects from its own view; once the views agree the spare stops if it ever started.
election_log() {  # the node's election and membership changes, for a failure message
  grep -hE '"roles elected"|elected scheduler|"msg":"(suspect|dead)"' "$work/n$1.log" | tail -8
}
wait_for 15 not_scheduling "$spare" ||
  fail "auto-$spare schedules beside $elected: $(election_log "$spare")"
echo "elected schedulers: $elected; spare auto-$spare"

# The spare answers Scheduler calls with UNAVAILABLE, naming the schedulers to ask.
set +e
cli --addr "$(addr "$spare")" get >"$work/spare.out" 2>&1; rc=$?
set -e
[ $rc -eq 1 ] || fail "get on the spare: exit $rc $(cat "$work/spare.out")"
grep -q "not a scheduler now" "$work/spare.out" || fail "spare's answer: $(cat "$work/spare.out")"
first=${elected%% *}
grep -q "$first" "$work/spare.out" || fail "the spare does not name $first: $(cat "$work/spare.out")"

tiny_spec 2 2 1 4s >"$work/tiny.yaml"
last=${elected##* }
# Written to the highest-id elected scheduler; the reconciler (lowest id) learns it by replication.
wait_for 15 cli --addr "$(addr "$(node_of "$last")")" apply -f "$work/tiny.yaml" ||
  fail "apply through $last"
describe() { cli --addr "$(addr "$1")" --json describe tiny; }
field() { describe "$1" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['status'].get('$2', '') if '$2' != 'reconciler' else d['reconciler'])"; }
ready_is() { [ "$(field "$1" ready)" = "$2" ] && [ "$(field "$1" present)" = "$2" ]; }
mid=$(echo "$elected" | cut -d' ' -f2)
wait_for 60 ready_is "$(node_of "$mid")" 2 ||
  fail "not 2 ready: $(describe "$(node_of "$mid")") $(grep -h scheduler "$work"/n*.log | tail -5)"
reconciler=$(field "$(node_of "$mid")" reconciler)
[ "$reconciler" = "$first" ] || fail "the reconciler is $reconciler, not the lowest-id elected $first"

answer() {
  curl -s -o "$work/body" -w '%{http_code}' --max-time 10 "http://127.0.0.1:$(port_of 1 http_port)/v1/completions" \
    -d '{"model":"exa-tiny-arith","prompt":"12+30=","max_tokens":4,"temperature":0}' | has 200
}
wait_for 20 answer || fail "no answer through the gateway: $(cat "$work/body")"
grep -q '"text":"42"' "$work/body" || fail "answer: $(cat "$work/body")"
echo "apply through $last: 2 ready, reconciled by $first, answered"

# kill -9 the reconciler: the four left elect the spare, which repairs its store and schedules.
kill -9 "${pids[$(node_of "$first")]}"
replaced() { [ -n "$(schedulers_seen 4)" ] && case " $(schedulers_seen 4) " in *" auto-$spare "*) true ;; *) false ;; esac; }
wait_for 60 replaced || fail "auto-$spare not elected after $first died: $(cli --addr "$(addr 1)" members)"
wait_for 20 scheduling "$spare" || fail "auto-$spare elected but not scheduling: $(tail -5 "$work/n$spare.log")"
repaired() { cli --addr "$(addr "$spare")" get -o yaml 2>/dev/null | has "name: tiny"; }
wait_for 20 repaired || fail "auto-$spare has no spec: $(cli --addr "$(addr "$spare")" get -o yaml 2>&1)"
# The dead node's replica (if it held one) is rebuilt once it is dead + deadGrace.
whole() { ready_is "$spare" 2 && [ "$(field "$spare" reconciler)" != "$first" ]; }
wait_for 90 whole || fail "not whole again: $(describe "$spare")"
echo "after kill -9 of $first: auto-$spare elected, repaired and reconciling with $(field "$spare" reconciler); 2 ready"

# SIGTERM of an elected scheduler: its control loop stops with the drain and it exits 0.
n_last=$(node_of "$last")
kill -TERM "${pids[$n_last]}"
set +e
timeout 30 tail --pid="${pids[$n_last]}" -f /dev/null
wait "${pids[$n_last]}"; rc=$?
set -e
[ $rc -eq 0 ] || fail "$last exited $rc after SIGTERM: $(tail -5 "$work/n$n_last.log")"
echo PASS
