#!/usr/bin/env bash
# Releases with real processes: a scheduler, an origin + gateway and three sim-backend
# inference nodes on which version v2 is 3x slower (inference.sim_slow_versions, a drill), with
# traffic flowing. Rolling v1 → v2 is rolled back by itself at stage 1 (p99 inter-token latency
# compared over the observation window; `rollout status` shows the comparison); a version change
# during a rollout is refused; rolling v1 → v3 (as fast as v1) is promoted through every stage;
# rolling v3 → v5, whose replicas fail every 40th step and the requests in it
# (inference.sim_failing_versions), is rolled back on the error rate the nodes report.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill_nodes; kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cli() { "$BIN/exaserve-cli" "$@"; }
publish_tiny v1 v2 v3 v4 v5  # v4: a second version refused during a rollout
start_control_plane
for n in 3 4 5; do
  EXASERVE_INFERENCE_REPLICAS_PER_MODEL=0 EXASERVE_INFERENCE_HOST_MEMORY_BUDGET=4Gi \
    EXASERVE_INFERENCE_BACKEND=sim EXASERVE_INFERENCE_SIM_SLOWDOWN=3 \
    EXASERVE_INFERENCE_SIM_SLOW_VERSIONS=v2 EXASERVE_INFERENCE_SIM_FAIL_EVERY_STEPS=40 \
    EXASERVE_INFERENCE_SIM_FAILING_VERSIONS=v5 EXASERVE_HEALTH_MODEL_INTERVAL=10m \
    start_node $n --role inference --join "$seed" --origin "$origin" --node-id "infer-$n"
done
spec() {
  cat <<YAML
apiVersion: exaserve.io/v1
kind: InferenceReplica
metadata: {name: tiny}
spec:
  model: exa-tiny-arith
  version: $1
  backend: sim
  replicas: 3
  resources: {gpu: 1}
  context: 256
  concurrency: 4
  maxUnavailable: 1
  rollout:
    stages: [1, 100%]
    observe: 8s
    regressionThreshold: 20%
    metrics: [p99Latency, errorRate]
    keepRollbackTarget: 1
    minSamples: 3
YAML
}
rollout_field() { cli --addr "$sched" --json rollout status tiny | python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
ready_of() { rollout_field ".get('ready', {}).get('$1', 0)"; }
wait_for 30 members_up 5 || fail "members"
spec v1 >"$work/v1.yaml"
wait_for 10 cli --addr "$sched" apply -f "$work/v1.yaml" || fail "apply v1"
three_ready() { [ "$(ready_of "$1")" = 3 ]; }
wait_for 60 three_ready v1 || fail "v1 not ready: $(cli --addr "$sched" describe tiny)"

# Traffic through the gateway for the whole test: every replica keeps reporting latency.
start_traffic
sleep 3

# v2 is 3x slower: rolled back by itself at stage 1, at most one v2 replica ever.
spec v2 >"$work/v2.yaml"
cli --addr "$sched" apply -f "$work/v2.yaml" >/dev/null || fail "apply v2"
max_v2=0
rolled_back() {
  local r; r=$(ready_of v2); [ "$r" -gt "$max_v2" ] && max_v2=$r
  [ "$(rollout_field "['phase']")" = rolled-back ]
}
deadline=$(( $(date +%s) + 60 ))
until rolled_back; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "no rollback: $(cli --addr "$sched" rollout status tiny)"
  sleep 0.3
done
cli --addr "$sched" rollout status tiny >"$work/status.txt"
grep -q "Rolled back: p99Latency .* on v2 vs .* on v1 (threshold +20%)" "$work/status.txt" ||
  fail "status: $(cat "$work/status.txt")"
grep -q "REGRESSED" "$work/status.txt" || fail "no comparison shown: $(cat "$work/status.txt")"
[ "$max_v2" -le 1 ] || fail "$max_v2 replicas of the bad version were ready (stage 1 is 1)"
back_to_v1() { three_ready v1 && [ "$(ready_of v2)" = 0 ]; }
wait_for 30 back_to_v1 || fail "not back on v1: $(cli --addr "$sched" rollout status tiny)"
grep -q "rolled back to v1" <<<"$(cli --addr "$sched" describe tiny)" || fail "no rollback event"
curl -s "http://127.0.0.1:$(port_of 2 http_port)/metrics" |
  has 'exaserve_rollout_rollbacks_total{deployment="tiny"} 1' || fail "rollback metric: $(curl -s "http://127.0.0.1:$(port_of 2 http_port)/metrics" | grep rollout_rollbacks)"

# Operator commands need a rollout.
set +e
cli --addr "$sched" rollout pause tiny >"$work/pause.out" 2>&1; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "no rollout in progress" "$work/pause.out" || fail "pause when idle: $rc $(cat "$work/pause.out")"

# v3 is as fast as v1: promoted through both stages. A version change meanwhile is refused.
spec v3 >"$work/v3.yaml"
cli --addr "$sched" apply -f "$work/v3.yaml" >/dev/null || fail "apply v3"
rolling_to_v3() { [ "$(rollout_field "['target']")" = v3 ]; }
wait_for 10 rolling_to_v3 || fail "v3 rollout not started: $(cli --addr "$sched" rollout status tiny)"
spec v4 >"$work/v4.yaml"
set +e
cli --addr "$sched" apply -f "$work/v4.yaml" >"$work/v4.out" 2>&1; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "a rollout from v1 to v3 is in progress" "$work/v4.out" ||
  fail "a second version during a rollout: exit $rc $(cat "$work/v4.out")"
promoted() { [ "$(rollout_field "['phase']")" = succeeded ] && three_ready v3 && [ "$(ready_of v1)" = 0 ]; }
wait_for 90 promoted || fail "v3 not promoted: $(cli --addr "$sched" rollout status tiny)"
cli --addr "$sched" rollout status tiny >"$work/status3.txt"
[ "$(grep -c "promoted" "$work/status3.txt")" = 2 ] || fail "stages: $(cat "$work/status3.txt")"

# v5 fails requests (every 40th step of its replicas): rolled back on the error rate.
spec v5 >"$work/v5.yaml"
cli --addr "$sched" apply -f "$work/v5.yaml" >/dev/null || fail "apply v5"
v5_rolled_back() { [ "$(rollout_field "['phase']")" = rolled-back ] && [ "$(rollout_field "['failed']")" = v5 ]; }
wait_for 60 v5_rolled_back || fail "v5 not rolled back: $(cli --addr "$sched" rollout status tiny)"
cli --addr "$sched" rollout status tiny >"$work/status5.txt"
grep -q "Rolled back: errorRate .* on v5 vs .* on v3" "$work/status5.txt" ||
  fail "v5 status: $(cat "$work/status5.txt")"
back_to_v3() { three_ready v3 && [ "$(ready_of v5)" = 0 ]; }
wait_for 30 back_to_v3 || fail "not back on v3: $(cli --addr "$sched" rollout status tiny)"
echo "ok: v2 (3x slower) rolled back at stage 1 with $max_v2 replica; v3 promoted through both stages; v5 (failing requests) rolled back on errorRate"
grep "errorRate" "$work/status5.txt" | head -3
sed -n 1,20p "$work/status.txt"
