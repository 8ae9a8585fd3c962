#!/usr/bin/env bash
# The alert drill on real processes: an observer, a scheduler, a storage node (origin +
# gateway) and three CPU inference nodes on loopback, a 3-replica spec applied and ready. Two of
# the three inference nodes stop (SIGSTOP) → the P0 ExaServeReplicasShort alert fires no sooner
# than its configured duration (5 s here) and within it plus scrape slack; it is logged, exposed
# as ALERTS on the observer's /metrics, shown by `exaserve-cli alerts` (asked of the observer and
# of another node) and by `exaserve-cli status`. They continue (SIGCONT) → it resolves and
# `alerts` lists it resolved.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; done; kill_nodes; rm -rf "$work"' EXIT
cli() { "$BIN/exaserve-cli" "$@"; }
model_dir=$(cd "$(dirname "$0")/../../models/exa-tiny-arith" && pwd)
now() { date +%s.%N; }
since() { python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$1" "$(now)"; }
FOR_SECONDS=5

cli model publish --dir "$model_dir" --name exa-tiny-arith --version v1 --origin "$work/origin" \
  --json >/dev/null || fail "publish"
start_node 1 --role storage,gateway --origin-dir "$work/origin" --node-id store-1
seed="127.0.0.1:$(port_of 1 gossip_port)"
origin="127.0.0.1:$(port_of 1 grpc_port)"
EXASERVE_SCHEDULER_RECONCILE_INTERVAL=500ms EXASERVE_SCHEDULER_RPC_TIMEOUT=1s \
  start_node 2 --role scheduler --join "$seed" --node-id sched-2
for n in 3 4 5; do
  EXASERVE_INFERENCE_REPLICAS_PER_MODEL=0 EXASERVE_INFERENCE_HOST_MEMORY_BUDGET=4Gi \
    EXASERVE_INFERENCE_THREADS=1 EXASERVE_INFERENCE_KV_CACHE_BYTES=8Mi \
    start_node $n --role inference --join "$seed" --origin "$origin" --node-id "infer-$n"
done
EXASERVE_OBSERVER_SCRAPE_INTERVAL=1s EXASERVE_OBSERVER_REPLICAS_INTERVAL=1s \
  EXASERVE_OBSERVER_REPLICAS_FOR=${FOR_SECONDS}s \
  start_node 6 --role observer --join "$seed" --node-id obs-6
obs="127.0.0.1:$(port_of 6 grpc_port)"
sched="127.0.0.1:$(port_of 2 grpc_port)"

tiny_spec 3 3 3 5m >"$work/tiny.yaml"
wait_for 20 cli --addr "$sched" apply -f "$work/tiny.yaml" || fail "apply"
ready() {
  [ "$(cli --addr "$sched" --json describe tiny |
    python3 -c "import json,sys; print(json.load(sys.stdin)['status'].get('ready', 0))")" = 3 ]
}
wait_for 60 ready || fail "not 3 ready: $(cli --addr "$sched" describe tiny)"

alerts_json() { cli --addr "${1:-$obs}" --json alerts; }
# The ExaServeReplicasShort alert of deployment tiny: "STATE FIRED_AT" of the active one, else of
# the newest resolved one (the observer lists active alerts first); "" when there is none.
state_of() {
  alerts_json | python3 -c "
import json,sys
d=json.load(sys.stdin)
s=[a for a in d['alerts'] if a['name']=='ExaServeReplicasShort' and a['labels'].get('deployment')=='tiny']
print(f\"{s[0]['state']} {s[0]['fired_at']}\" if s else '')"
}
all_up() {
  alerts_json | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if d['targets']==6 and d['targets_up']==6 else 1)"
}
wait_for 20 all_up || fail "the observer does not scrape all 6 nodes: $(alerts_json)"
# The observer also writes the members as Prometheus file_sd targets.
sd_has_all() {
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if len(d)==6 and all(e['labels']['node'] for e in d) else 1)" "$work/n6/observer/targets.json"
}
wait_for 10 sd_has_all || fail "observer file_sd: $(cat "$work/n6/observer/targets.json" 2>&1)"
# While replicas come up the rule may be pending (ready < desired), or even fire and resolve on
# a slow machine; once they are ready nothing may be active.
no_alert() { case "$(state_of)" in "" | resolved*) return 0 ;; *) return 1 ;; esac; }
wait_for 10 no_alert || fail "an alert with every replica ready: $(alerts_json)"

# Two of three inference nodes stop: 1 of 3 replicas left, below 95 %.
kill -STOP "${pids[4]}" "${pids[5]}"
stopped=$(now)
seen_pending=0
for _ in $(seq 1 300); do
  st=$(state_of)
  [ "${st%% *}" = pending ] && [ $seen_pending = 0 ] && { seen_pending=1; pending_s=$(since "$stopped"); }
  [ "${st%% *}" = firing ] && break
  sleep 0.1
done
fire_s=$(since "$stopped")
[ "${st%% *}" = firing ] || fail "not firing ${fire_s}s after the stop: $(alerts_json) $(grep -h observer "$work/n6.log" | tail -5)"
[ $seen_pending = 1 ] || fail "never seen pending before firing"
python3 -c "import sys; f=float(sys.argv[1]); sys.exit(0 if $FOR_SECONDS <= f <= $FOR_SECONDS + 15 else 1)" "$fire_s" ||
  fail "fired ${fire_s}s after the stop; want between ${FOR_SECONDS}s and $((FOR_SECONDS + 15))s"
alerts_json | python3 -c "
import json,sys
a=[a for a in json.load(sys.stdin)['alerts'] if a['name']=='ExaServeReplicasShort'][0]
assert a['severity']=='P0', a
assert abs(a['value'] - 1/3) < 0.01, a
assert '1 of 3 replicas ready' in a['summary'], a
" || fail "alert fields: $(alerts_json)"
grep -q '"msg":"alert firing".*ExaServeReplicasShort' "$work/n6.log" || fail "firing not logged"
curl -sf "http://127.0.0.1:$(port_of 6 http_port)/metrics" >"$work/metrics"
grep -q '^ALERTS{alertname="ExaServeReplicasShort",alertstate="firing",deployment="tiny",dimension="replica_health",severity="P0"} 1$' \
  "$work/metrics" || fail "no ALERTS series: $(grep ALERTS "$work/metrics")"
promtool check metrics <"$work/metrics" || fail "promtool check metrics on the observer"
cli --addr "$obs" alerts >"$work/alerts.txt"
grep -q "^firing .*P0 .*ExaServeReplicasShort .*deployment=tiny" "$work/alerts.txt" ||
  fail "alerts text: $(cat "$work/alerts.txt")"
# Asked of a node that is not an observer, the CLI finds the observer through membership.
cli --addr "$sched" alerts | has "ExaServeReplicasShort" || fail "alerts through the scheduler"
cli --addr "$obs" status >"$work/status.txt"
grep -q "^alerts (observer obs-6): 1 firing" "$work/status.txt" || fail "status alerts: $(cat "$work/status.txt")"
grep -q "^  inference  3 nodes" "$work/status.txt" || fail "status roles: $(cat "$work/status.txt")"
grep -q "^tiny .*exa-tiny-arith@v1 .* 1 .* 3 " "$work/status.txt" ||
  fail "status deployments: $(cat "$work/status.txt")"
cli --addr "$obs" --json status | python3 -c "
import json,sys
d=json.load(sys.stdin)
assert d['node_id']=='obs-6' and d['state']=='ready', d
c=d['cluster']
assert c['members']['total']==6, c['members']
assert c['by_role']['inference']['nodes']==3, c['by_role']
assert [a['name'] for a in c['alerts']['alerts']]==['ExaServeReplicasShort'], c['alerts']
assert c['deployments']['deployments'][0]['name']=='tiny', c['deployments']
" || fail "status --json: $(cli --addr "$obs" --json status)"

# They continue: 3 of 3 again, the alert resolves.
kill -CONT "${pids[4]}" "${pids[5]}"
resumed=$(now)
fired_at=${st#* }
is_resolved() { [ "$(state_of)" = "resolved $fired_at" ]; }
wait_for 30 is_resolved || fail "not resolved $(since "$resumed")s after they continued: $(alerts_json)"
resolve_s=$(since "$resumed")
grep -q '"msg":"alert resolved".*ExaServeReplicasShort' "$work/n6.log" || fail "resolution not logged"
cli --addr "$obs" alerts | has "^resolved .*ExaServeReplicasShort" || fail "alerts does not list it resolved"
grep -q '^ALERTS{' <<<"$(curl -sf "http://127.0.0.1:$(port_of 6 http_port)/metrics")" && fail "ALERTS still exposed"
echo "alerts: ok (2 of 3 inference nodes stopped: P0 replicas-short pending after ${pending_s}s, firing after ${fire_s}s (for ${FOR_SECONDS}s); resolved ${resolve_s}s after they continued)"
