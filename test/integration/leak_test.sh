#!/usr/bin/env bash
# Pre-staging, memory-leak detection and max-lifetime surge copies with real processes. A spec of
# four replicas over two
# nodes: each node pulls the model (Node.StageModel, an event per node) before the wave starts
# any replica on it. Leaks (docs/architecture.md#leak-detection): a scheduler sampling every second,
# a gateway with traffic, and two sim-backend inference nodes, one of which leaks 256 KiB per
# engine step in every replica (inference.sim_leak_bytes_per_step, a drill: real, resident
# allocations). The nodes report each replica's memory; the scheduler flags the leaking node's
# replicas — an event on the deployment naming replica and node, a warning, the
# exaserve_scheduler_replicas_leaking gauge — and never the other node's, whose memory is flat —
# and replaces them (scheduler.leak_action: recycle) by surge copies on the flat node, ready first.
# Last, maxLifetime: every replica is replaced by a surge copy on the other node, ready first.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill_nodes; kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cli() { "$BIN/exaserve-cli" "$@"; }
publish_tiny v1
EXASERVE_SCHEDULER_LEAK_SAMPLE_INTERVAL=1s EXASERVE_SCHEDULER_LEAK_RISING_SAMPLES=3 \
  start_control_plane
for n in 3 4; do
  leak=0
  [ $n = 3 ] && leak=256Ki
  EXASERVE_INFERENCE_REPLICAS_PER_MODEL=0 EXASERVE_INFERENCE_HOST_MEMORY_BUDGET=8Gi \
    EXASERVE_INFERENCE_BACKEND=sim EXASERVE_INFERENCE_SIM_LEAK_BYTES_PER_STEP=$leak \
    EXASERVE_HEALTH_MODEL_INTERVAL=10m \
    start_node $n --role inference --join "$seed" --origin "$origin" --node-id "infer-$n"
done
{ tiny_spec 4 4 4 30s | sed 's/backend: cpu/backend: sim/'; echo "  maxLifetime: 1m"; } >"$work/spec.yaml"
wait_for 30 members_up 4 || fail "members"
wait_for 10 cli --addr "$sched" apply -f "$work/spec.yaml" || fail "apply"
ready_on() {  # ready_on N: ready replicas on node infer-N (`replicas` lists every node's)
  cli --addr "$sched" --json replicas | python3 -c "import json,sys
print(sum(r['state']=='ready' and r['node_id']==sys.argv[1] for r in json.load(sys.stdin)))" "infer-$1"
}
four_ready() { [ $(( $(ready_on 3) + $(ready_on 4) )) = 4 ]; }
wait_for 60 four_ready || fail "not ready ($(ready_on 3) + $(ready_on 4)): $(cli --addr "$sched" describe tiny)"
[ "$(ready_on 3)" -ge 1 ] && [ "$(ready_on 4)" -ge 1 ] ||
  fail "the spec did not spread over both nodes: $(ready_on 3) and $(ready_on 4)"
# The wave's weights were pre-staged as a step of their own: each node pulled the model
# (Node.StageModel) before any replica of the wave was started on it.
described=$(cli --addr "$sched" describe tiny)
for n in 3 4; do
  grep -q "prestage exa-tiny-arith@v1 on infer-$n: wave 1" <<<"$described" ||
    fail "no pre-stage event for infer-$n: $described"
  staged_line=$(grep -n '"model pre-staged"' "$work/n$n.log" | head -1 | cut -d: -f1)
  admitted_line=$(grep -n '"replica admitted' "$work/n$n.log" | head -1 | cut -d: -f1)
  [ -n "$staged_line" ] && [ -n "$admitted_line" ] && [ "$staged_line" -lt "$admitted_line" ] ||
    fail "infer-$n started a replica before the model was staged: $(grep -E 'pre-stag|admitted' "$work/n$n.log")"
done
# Each replica reports its memory (the sim's reservation, plus the leak on node 3).
cli --addr "$sched" --json replicas |
  python3 -c "import json,sys; sys.exit(0 if all(r['memory_bytes']>0 for r in json.load(sys.stdin)) else 1)" ||
  fail "a replica reports no memory"

n3=$(ready_on 3)
start_traffic

leaking() { curl -s "http://127.0.0.1:$(port_of 2 http_port)/metrics" |
  awk '/^exaserve_scheduler_replicas_leaking / {print $2}'; }
status_field() { cli --addr "$sched" --json describe tiny | python3 -c "import json,sys; print(json.load(sys.stdin)['status'].get('$1', 0))"; }
generations() { cli --addr "$sched" --json describe tiny | python3 -c "import json,sys
print(' '.join(sorted(str(r['generation']) for r in json.load(sys.stdin)['replicas'])))"; }
flagged_event() { cli --addr "$sched" describe tiny | has "memory leak suspected: .* on infer-3 "; }
wait_for 40 flagged_event ||
  fail "node 3's replicas not flagged (gauge $(leaking)): $(cli --addr "$sched" describe tiny)"
grep -q '"memory leak suspected"' "$work/n2.log" || fail "no warning in the scheduler's log"
echo "leak: $(cli --addr "$sched" describe tiny | grep -m1 'memory leak suspected')"

# scheduler.leak_action: recycle (the default): each flagged replica is replaced by a surge copy
# on the other node (generation 2), which serves before the leaking one stops, so the deployment
# never has fewer than 4 ready replicas; the flags (and the gauge) go with the replaced ones.
# until_tracking_ready SECONDS WHAT CMD...: polls CMD until it succeeds (failing with WHAT after
# SECONDS), keeping in min_ready the fewest ready replicas the deployment had meanwhile.
until_tracking_ready() {
  local seconds=$1 what=$2 r
  shift 2
  local deadline=$(( $(date +%s) + seconds ))
  min_ready=4
  until "$@"; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "$what: $(cli --addr "$sched" describe tiny)"
    r=$(status_field ready)
    [ "$r" -lt "$min_ready" ] && min_ready=$r
    sleep 0.3
  done
}
recycled() { [ "$(ready_on 3)" = 0 ] && [ "$(ready_on 4)" = 4 ] && [ "$(leaking)" = 0 ]; }
until_tracking_ready 60 "leaking replicas not replaced" recycled
[ "$min_ready" = 4 ] || fail "ready fell to $min_ready while leaking replicas were replaced"
described=$(cli --addr "$sched" describe tiny)
[ "$(grep -c 'memory leak: surge copy of generation 1 on infer-3' <<<"$described")" = "$n3" ] ||
  fail "not $n3 leak surge copies: $described"
grep "memory leak suspected" <<<"$described" | has "on infer-4 " &&
  fail "the flat node was flagged: $described"
# The copies on the flat node stay unflagged while the traffic goes on.
sleep 3
[ "$(leaking)" = 0 ] || fail "flagged on the flat node: $(leaking)"
replacements() {  # replacements() CAUSE: the scheduler's counter for deployment tiny
  curl -s "http://127.0.0.1:$(port_of 2 http_port)/metrics" |
    awk -v c="$1" '$1 == "exaserve_scheduler_replica_replacements_total{deployment=\"tiny\",cause=\"" c "\"}" {print $2}'
}
[ "$(replacements memory_leak)" = "$n3" ] ||
  fail "replacements counter: '$(replacements memory_leak)', want $n3: $(curl -s "http://127.0.0.1:$(port_of 2 http_port)/metrics" | grep replacements)"
echo "recycle: $n3 leaking replica(s) of infer-3 replaced by copies on infer-4, ready never below $min_ready"

# maxLifetime (1m, jittered to 54-60 s) with room on the other node: each replica is replaced by a
# surge copy there (the next generation) before it stops, so the deployment never has fewer than
# 4 ready replicas on the way. No traffic from here: the copies landing on the leaking node do
# not grow without engine steps.
kill "${traffic[@]}" 2>/dev/null || true
before=$(generations)
want=$(python3 -c "import sys; print(' '.join(sorted(str(int(g) + 1) for g in sys.argv[1:])))" $before)
all_replaced() { [ "$(generations)" = "$want" ]; }
until_tracking_ready 100 "not all replaced in time (want generations $want)" all_replaced
[ "$min_ready" = 4 ] || fail "ready fell to $min_ready during the lifetime restarts: $(cli --addr "$sched" describe tiny)"
described=$(cli --addr "$sched" describe tiny)
[ "$(grep -c 'max lifetime: surge copy of generation' <<<"$described")" = 4 ] ||
  fail "not four surge copies: $described"
# The replaced ones drain and go: describe counts those still draining apart.
no_stopping() {  # the field must be there: no default
  [ "$(cli --addr "$sched" --json describe tiny | python3 -c "import json,sys; print(json.load(sys.stdin)['status']['stopping'])")" = 0 ]
}
wait_for 30 no_stopping || fail "replaced replicas still draining: $(cli --addr "$sched" describe tiny)"
[ "$(replacements max_lifetime)" = 4 ] || fail "max_lifetime replacements: '$(replacements max_lifetime)', want 4"
echo "lifetime: 4 replicas replaced by surge copies ($before -> $want), ready never below $min_ready"
