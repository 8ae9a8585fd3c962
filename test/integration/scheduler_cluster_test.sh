#!/usr/bin/env bash
# The scheduler as a service with real processes: 3 schedulers, 3 CPU inference nodes and a
# storage node (origin + gateway) on loopback. `apply` → replicas placed by the reconciler and
# ready (pulled from the origin); a request answered through the gateway; kill -9 the reconciling
# scheduler (the Raft leader) → another takes over within 15 s with the spec intact, and a
# StopReplica carrying the deposed leader's term is refused by the node; kill -9 an inference
# node → its replica rebuilt elsewhere only after deadGrace; stop and restart every scheduler →
# specs still there; a node that missed a `replica label` is relabelled from the stored rule; a
# write acknowledged to the CLI survives kill -9 of the node that took it; invalid specs and
# unknown models are refused with exit 2, nothing written.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill_nodes; rm -rf "$work"' EXIT
cli() { "$BIN/exaserve-cli" "$@"; }
model_dir=$(cd "$(dirname "$0")/../../models/exa-tiny-arith" && pwd)
now() { date +%s.%N; }
since() { python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$1" "$(now)"; }

cli model publish --dir "$model_dir" --name exa-tiny-arith --version v1 --origin "$work/origin" \
  --json >/dev/null || fail "publish"
start_node 1 --role storage,gateway --origin-dir "$work/origin"
seed="127.0.0.1:$(port_of 1 gossip_port)"
origin="127.0.0.1:$(port_of 1 grpc_port)"
for n in 2 3 4; do
  EXASERVE_SCHEDULER_RECONCILE_INTERVAL=500ms start_node $n --role scheduler --join "$seed" \
    --node-id "sched-$n"
done
for n in 5 6 7; do
  EXASERVE_INFERENCE_REPLICAS_PER_MODEL=0 EXASERVE_INFERENCE_HOST_MEMORY_BUDGET=4Gi \
    EXASERVE_INFERENCE_THREADS=1 EXASERVE_INFERENCE_KV_CACHE_BYTES=8Mi \
    start_node $n --role inference --join "$seed" --origin "$origin" --node-id "infer-$n"
done
sched() { echo "127.0.0.1:$(port_of "$1" grpc_port)"; }
all_alive() { [ "$(cli --addr "$(sched "$1")" --json members | python3 -c "import json,sys; print(sum(1 for m in json.load(sys.stdin) if m['state']=='alive'))")" = 7 ]; }
for n in 2 3 4; do wait_for 30 all_alive $n || fail "sched-$n does not see 7 members"; done

# Bad input: nothing is written.
cat >"$work/bad.yaml" <<'YAML'
apiVersion: exaserve.io/v1
kind: InferenceReplica
metadata: {name: tiny}
spec: {model: exa-tiny-arith, replicas: -3, backend: cpu}
YAML
set +e
cli --addr "$(sched 3)" apply -f "$work/bad.yaml" >"$work/bad.out" 2>&1; rc=$?
set -e
[ $rc -eq 2 ] || fail "negative replicas: exit $rc $(cat "$work/bad.out")"
grep -q "spec.replicas" "$work/bad.out" || fail "the error does not name spec.replicas: $(cat "$work/bad.out")"
sed 's/replicas: -3/replicas: 1/; s/exa-tiny-arith/no-such-model/' "$work/bad.yaml" >"$work/unknown.yaml"
set +e
cli --addr "$(sched 3)" apply -f "$work/unknown.yaml" >"$work/unknown.out" 2>&1; rc=$?
set -e
[ $rc -eq 2 ] || fail "unknown model: exit $rc $(cat "$work/unknown.out")"
grep -q "no-such-model" "$work/unknown.out" || fail "unknown model error: $(cat "$work/unknown.out")"
[ "$(cli --addr "$(sched 3)" get -o yaml)" = "" ] || fail "a refused spec was stored"
# Sent to a node without the scheduler role: refused, naming the schedulers to ask instead.
set +e
cli --addr "$(sched 5)" apply -f "$work/unknown.yaml" >"$work/nosched.out" 2>&1; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "runs no scheduler; point --addr at one: sched-2 (127.0.0.1:" "$work/nosched.out" ||
  fail "apply to an inference node: exit $rc $(cat "$work/nosched.out")"

tiny_spec 3 2 1 6s >"$work/tiny.yaml"
# Written to the highest-id scheduler: forwarded to the Raft leader, which reconciles.
cli --addr "$(sched 4)" apply -f "$work/tiny.yaml" >"$work/apply.out" || fail "apply: $(cat "$work/apply.out")"
grep -q "inferencereplica/tiny created" "$work/apply.out" || fail "apply output: $(cat "$work/apply.out")"
grep -q "^+  replicas: 3" "$work/apply.out" || fail "apply printed no diff: $(cat "$work/apply.out")"
describe() { cli --addr "$(sched "$1")" --json describe tiny; }
status_of() { describe "$1" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['status'].get('$2', ''))"; }
ready_is() { [ "$(status_of "$1" ready)" = "$2" ] && [ "$(status_of "$1" present)" = "$2" ]; }
wait_for 60 ready_is 3 3 || fail "not 3 ready: $(describe 3) $(grep -h scheduler "$work"/n2.log | tail -5)"
reconciler=$(describe 3 | python3 -c "import json,sys; print(json.load(sys.stdin)['reconciler'])")
case "$reconciler" in sched-2 | sched-3 | sched-4) ;; *) fail "the reconciler is '$reconciler', not a scheduler" ;; esac
for n in 2 4; do
  [ "$(describe $n | python3 -c "import json,sys; print(json.load(sys.stdin)['reconciler'])")" = "$reconciler" ] ||
    fail "sched-$n names another reconciler than $reconciler: $(describe $n)"
done
describe 3 | python3 -c "
import json,sys
d=json.load(sys.stdin)
nodes=sorted(r['node'] for r in d['replicas'])
assert nodes == ['infer-5','infer-6','infer-7'], nodes  # spread, none on control nodes
" || fail "placement: $(describe 3)"
cli --addr "$(sched 2)" get | has "tiny .*exa-tiny-arith@v1 .* 3 cpu" || fail "get: $(cli --addr "$(sched 2)" get)"
# A version the weights store does not have is refused like an unknown model, though the model's
# shape is known from v1 (that once let any version through, to be pre-staged and fail).
sed 's/version: v1/version: v9/' "$work/tiny.yaml" >"$work/v9.yaml"
set +e
cli --addr "$(sched 4)" apply -f "$work/v9.yaml" >"$work/v9.out" 2>&1; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "exa-tiny-arith@v9 is neither a preset nor in the weights store" "$work/v9.out" ||
  fail "unknown version: exit $rc $(cat "$work/v9.out")"
cli --addr "$(sched 2)" get | has "tiny .*exa-tiny-arith@v1 " || fail "a refused version was stored"

# A label set with `replica label` is stored as a rule in the spec store: every live replica gets
# it now, and those the scheduler starts later (the rebuild below) carry it too.
cli --addr "$(sched 3)" replica label --selector model=exa-tiny-arith --label track=canary \
  >"$work/label.out" 2>&1 || fail "replica label: $(cat "$work/label.out")"
grep -q "3 replicas matched" "$work/label.out" || fail "label: $(cat "$work/label.out")"
grep -q "stored on scheduler .* (1 label rules)" "$work/label.out" || fail "rule not stored: $(cat "$work/label.out")"
set +e
cli --addr "$(sched 3)" replica label --label exaserve.io/deployment=x >"$work/badlabel.out" 2>&1; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "reserved for the scheduler" "$work/badlabel.out" ||
  fail "a reserved label key: exit $rc $(cat "$work/badlabel.out")"

answer() {
  curl -s -o "$work/body" -w '%{http_code}' --max-time 10 "http://127.0.0.1:$(port_of 1 http_port)/v1/completions" \
    -d '{"model":"exa-tiny-arith","prompt":"12+30=","max_tokens":4,"temperature":0}' | has 200
}
wait_for 20 answer || fail "no answer through the gateway: $(cat "$work/body")"
grep -q '"text":"42"' "$work/body" || fail "answer: $(cat "$work/body")"

# Version routes live in the spec store: set through any node, followed by the gateway.
gw="127.0.0.1:$(port_of 1 grpc_port)"
cli --addr "$gw" gateway route --header X-Canary --target label:track --default stable \
  >"$work/route.out" 2>&1 || fail "route: $(cat "$work/route.out")"
grep -q "stored on scheduler" "$work/route.out" || fail "route not stored: $(cat "$work/route.out")"
gateway_follows() { cli --addr "$gw" gateway routes | has "x-canary -> label track (default stable)"; }
wait_for 10 gateway_follows || fail "the gateway did not follow: $(cli --addr "$gw" gateway routes)"
set +e
cli --addr "$gw" gateway route --header "bad header!" --target replica-version >"$work/badroute.out" 2>&1; rc=$?
set -e
[ $rc -eq 2 ] || fail "a bad header: exit $rc $(cat "$work/badroute.out")"

# kill -9 the reconciler (the Raft leader), then scale up through another scheduler: the next
# leader acts. S and T are the two left.
node_term() {  # the highest scheduler term that has commanded inference node N
  curl -s "http://127.0.0.1:$(port_of "$1" http_port)/metrics" |
    awk '/^exaserve_node_scheduler_term /{print int($2)}'
}
old_term=0
for n in 5 6 7; do t=$(node_term $n); [ "${t:-0}" -gt "$old_term" ] && old_term=$t; done
[ "$old_term" -gt 0 ] || fail "no inference node reports the term that commanded it"
V=${reconciler#sched-}
survivors=()
for n in 2 3 4; do [ "$n" = "$V" ] || survivors+=("$n"); done
S=${survivors[0]}
T=${survivors[1]}
kill -9 "${pids[$V]}"
killed_at=$(now)
sed 's/replicas: 3/replicas: 4/' "$work/tiny.yaml" >"$work/tiny4.yaml"
wait_for 10 cli --addr "$(sched $S)" apply -f "$work/tiny4.yaml" || fail "apply with one scheduler down"
takeover() {
  local r
  r=$(describe $S | python3 -c "import json,sys; print(json.load(sys.stdin)['reconciler'])")
  [ -n "$r" ] && [ "$r" != "$reconciler" ] && [ "$(status_of $S present)" = 4 ]
}
wait_for 20 takeover || fail "no take-over: $(describe $S)"
takeover_s=$(since "$killed_at")
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 15 else 1)" "$takeover_s" ||
  fail "take-over took ${takeover_s}s (> 15)"
cli --addr "$(sched $T)" get -o yaml | has "replicas: 4" || fail "spec not intact on sched-4"
wait_for 30 ready_is $S 4 || fail "not 4 ready: $(describe $S)"

# The deposed leader's late command: a StopReplica carrying its term, sent to a node the new
# leader has commanded since, is refused and the replica keeps serving.
probe="$(dirname "$0")/grpc_probe.py"
py=  # Debian's python3-grpcio (scripts/setup-deps.sh) is for /usr/bin/python3
for p in python3 /usr/bin/python3; do "$p" -c "import grpc" 2>/dev/null && { py=$p; break; }; done
[ -n "$py" ] || fail "python3-grpcio is not installed (scripts/setup-deps.sh installs it)"
fenced=""
while read -r id node; do
  n=${node#infer-}
  if [ "$(node_term "$n")" -gt "$old_term" ]; then fenced="$id $n"; break; fi
done < <(describe $S | python3 -c "import json,sys; [print(r['id'], r['node']) for r in json.load(sys.stdin)['replicas']]")
[ -n "$fenced" ] || fail "no node was commanded by the new leader (term > $old_term): $(describe $S)"
read -r fenced_id fenced_node <<<"$fenced"
late=$("$py" "$probe" "127.0.0.1:$(port_of "$fenced_node" grpc_port)" stop-replica "$fenced_id" "$old_term")
grep -q "^FAILED_PRECONDITION .*term $old_term refused" <<<"$late" ||
  fail "a StopReplica of deposed term $old_term was not refused by infer-$fenced_node: $late"
sleep 1
ready_is $S 4 || fail "the refused StopReplica stopped a replica: $(describe $S)"

# kill -9 an inference node: its replica(s) are rebuilt elsewhere, only after death + deadGrace.
victim_ids=$(describe $S | python3 -c "import json,sys; print(' '.join(r['id'] for r in json.load(sys.stdin)['replicas'] if r['node']=='infer-7'))")
[ -n "$victim_ids" ] || fail "no replica on infer-7: $(describe $S)"
kill -9 "${pids[7]}"
infer_killed=$(now)
rebuilt() {
  describe $S | python3 -c "
import json,sys
d=json.load(sys.stdin)
ready=[r for r in d['replicas'] if r['phase']=='ready' and r['node']!='infer-7']
sys.exit(0 if len(ready)==4 else 1)"
}
# Not before the grace: the node must first be declared dead, then 6 s pass.
sleep 5
rebuilt && fail "rebuilt within 5 s of the kill (before death + deadGrace): $(describe $S)"
wait_for 60 rebuilt || fail "not rebuilt: $(describe $S)"
rebuild_s=$(since "$infer_killed")
labelled() {  # every ready replica of the deployment carries the stored label
  cli --addr "$(sched $S)" --json replicas | python3 -c "
import json, sys
rs = [r for r in json.load(sys.stdin) if r['state'] == 'ready' and r['labels'].get('exaserve.io/deployment', '').startswith('tiny@')]
sys.exit(0 if len(rs) == 4 and all(r['labels'].get('track') == 'canary' for r in rs) else 1)"
}
wait_for 10 labelled || fail "a rebuilt replica lacks the stored label: $(cli --addr "$(sched $S)" --json replicas)"
# Events are kept by the scheduler that acts: ask the leader.
describe_leader() {
  local r
  r=$(describe $S | python3 -c "import json,sys; print(json.load(sys.stdin)['reconciler'])")
  describe "${r#sched-}"
}
grep -q "rebuild" <<<"$(describe_leader)" || fail "no rebuild event: $(describe_leader)"

# A node that misses a `replica label` (stopped for 2.5 s: not long enough to be declared dead;
# the rule merges into the stored one of the same selector)
# is relabelled by the reconciler from the stored rule once it answers again.
missed=$(describe $S | python3 -c "import json,sys; print(sorted(r['node'] for r in json.load(sys.stdin)['replicas'] if r['node'] != 'infer-7')[-1])")
kill -STOP "${pids[${missed#infer-}]}"
set +e
cli --addr "$(sched $S)" --timeout 2s replica label --selector model=exa-tiny-arith \
  --label tier=gold >"$work/label2.out" 2>&1; rc=$?
set -e
kill -CONT "${pids[${missed#infer-}]}"
[ $rc -eq 1 ] || fail "label with a node stopped: exit $rc $(cat "$work/label2.out")"
grep -q "stored on scheduler .* (1 label rules)" "$work/label2.out" ||
  fail "rule not stored: $(cat "$work/label2.out")"
gold() {
  cli --addr "$(sched $S)" --json replicas | python3 -c "
import json, sys
rs = [r for r in json.load(sys.stdin) if r['state'] == 'ready' and r['labels'].get('exaserve.io/deployment', '').startswith('tiny@')]
sys.exit(0 if len(rs) == 4 and all(r['labels'].get('tier') == 'gold' for r in rs) else 1)"
}
wait_for 15 gold || fail "$missed not relabelled: $(cli --addr "$(sched $S)" --json replicas)"
grep -q "relabel .* on $missed (stored label rules)" <<<"$(describe_leader)" ||
  fail "no relabel event: $(describe_leader)"

# Node operations through a scheduler: a drain that would drop below 99 % ready is refused; a
# cordon is stored, listed and lifted.
set +e
cli --addr "$(sched $S)" node drain infer-5 >"$work/drain.out" 2>&1; rc=$?
set -e
[ $rc -eq 1 ] || fail "drain below the floor: exit $rc $(cat "$work/drain.out")"
grep -q "below the 99 % floor" "$work/drain.out" || fail "drain refusal: $(cat "$work/drain.out")"
cli --addr "$(sched $S)" node cordon infer-5 | has "infer-5  cordoned" || fail "cordon"
cli --addr "$(sched $T)" node ops | has "infer-5  cordoned" || fail "cordon not replicated"
cli --addr "$(sched $S)" node taint infer-6 maintenance >/dev/null || fail "taint"
set +e
cli --addr "$(sched $S)" node taint infer-6 "" >"$work/taint.out" 2>&1; rc=$?
set -e
[ $rc -eq 2 ] || fail "an empty taint: exit $rc $(cat "$work/taint.out")"
cli --addr "$(sched $S)" node uncordon infer-5 | has "infer-5  schedulable" || fail "uncordon"
cli --addr "$(sched $S)" node untaint infer-6 maintenance >/dev/null || fail "untaint"
set +e
cli --addr "$(sched $S)" node untaint infer-6 maintenance >"$work/taint.out" 2>&1; rc=$?
set -e
[ $rc -eq 1 ] && grep -q 'has no taint "maintenance"' "$work/taint.out" ||
  fail "untaint of a taint not set: exit $rc $(cat "$work/taint.out")"

# Stop and restart every scheduler (sched-$V was killed): the specs are still there.
for n in $S $T; do kill -TERM "${pids[$n]}"; done
for n in $S $T; do wait "${pids[$n]}" 2>/dev/null || true; done
for n in 2 3 4; do
  rm -f "$work/n$n/endpoints.json"
  EXASERVE_SCHEDULER_RECONCILE_INTERVAL=500ms start_node $n --role scheduler --join "$seed" \
    --node-id "sched-$n"
done
# The survivors hold the last write in their logs; sched-$V was killed before it and catches up
# from the leader. A read is linearizable, so it waits for the restarted schedulers to elect one.
has_latest() { cli --addr "$(sched "$1")" get -o yaml 2>/dev/null | has "replicas: 4"; }
for n in $S $T; do
  wait_for 30 has_latest "$n" ||
    fail "sched-$n lost the spec over a restart: $(cli --addr "$(sched "$n")" get -o yaml 2>&1)"
done
wait_for 20 has_latest $V || fail "sched-$V not repaired: $(cli --addr "$(sched $V)" get -o yaml 2>&1)"

# A write acknowledged to the CLI survives kill -9 of the node that took it.
sed 's/replicas: 3/replicas: 2/; s/name: tiny/name: tiny-b/' "$work/tiny.yaml" >"$work/b.yaml"
wait_for 20 all_alive 4 || true
cli --addr "$(sched $T)" apply -f "$work/b.yaml" >/dev/null || fail "apply tiny-b"
kill -9 "${pids[$T]}"
has_b() { cli --addr "$(sched "$1")" get tiny-b >/dev/null 2>&1; }
# The writer may have led: the read then waits for the survivors to elect a new leader.
wait_for 20 has_b $S || fail "tiny-b not on sched-$S after its writer died"
rm -f "$work/n$T/endpoints.json"
start_node $T --role scheduler --join "$seed" --node-id sched-$T
wait_for 20 has_b $T || fail "tiny-b not persisted on its writer"

echo "{\"takeover_s\": $takeover_s, \"rebuild_s\": $rebuild_s}"
echo "ok: apply → 3 ready and answering; reconciler kill → another scheduler took over in ${takeover_s}s; inference node kill → rebuilt in ${rebuild_s}s (grace 6s); specs survived restarts and kill -9 of the writer"
