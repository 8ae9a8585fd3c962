#!/usr/bin/env bash
# Performance level of health (docs/architecture.md#health-checks): of three inference nodes, one runs its replica 2×
# slower (the sim backend's slowdown drill). The gateway compares inter-token P99 with the
# model's median and ejects the slow replica from routing — reported in the log and /metrics,
# not killed — while the other two keep serving.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill_nodes; rm -rf "$work"' EXIT

# The ejection factor is 1.3 here, not the default 1.5: on a loaded 2-core CI machine scheduling
# noise inflates the healthy replicas' inter-token P99 (29 ms against 20 ms modeled) more than
# the slow one's, so a 2× modeled slowdown has measured 1.5–2.3× the median.
EXASERVE_HEALTH_PERFORMANCE_INTERVAL=2s EXASERVE_HEALTH_PERFORMANCE_FACTOR=1.3 \
  start_node 1 --role gateway
seed="127.0.0.1:$(port_of 1 gossip_port)"
gw="http://127.0.0.1:$(port_of 1 http_port)"
for n in 2 3 4; do
  slow=1; [ $n = 4 ] && slow=2
  EXASERVE_INFERENCE_BACKEND=sim EXASERVE_INFERENCE_KV_CACHE_BYTES=8Gi \
    EXASERVE_INFERENCE_SIM_SLOWDOWN=$slow start_node $n --role inference --join "$seed"
done
slow_node=$(json_field "$work/n4/endpoints.json" node_id)

three_ready() {
  [ "$(curl -s "$gw/metrics" | awk '/^exaserve_gateway_watched_nodes / {print $2}')" = 3 ] &&
    [ "$(curl -s "$gw/v1/completions" -d '{"prompt":"1+1=","max_tokens":2}' -o /dev/null -w '%{http_code}')" = 200 ]
}
wait_for 20 three_ready || fail "the gateway did not see three inference nodes"

# Round after round of requests, until every replica has latency measurements and the gateway
# has evaluated them.
ejected() { [ "$(curl -s "$gw/metrics" | awk '/^exaserve_gateway_replicas_ejected / {print $2}')" = 1 ]; }
wait_ejected() {
  local deadline=$(( $(date +%s) + 30 ))
  until ejected; do
    [ "$(date +%s)" -lt "$deadline" ] || { for n in 2 3 4; do curl -s "http://127.0.0.1:$(port_of $n http_port)/metrics" | grep -E "^exaserve_replica_(inter_token|ttft)"; done; tail -3 "$work/n1.log"; fail "the slow replica was not ejected in 30 s"; }
    clients=()
    for i in $(seq 1 9); do
      curl -s -o /dev/null "$gw/v1/completions" -d '{"prompt":"1+1=","max_tokens":12}' & clients+=($!)
    done
    wait "${clients[@]}"
  done
}
served() {
  curl -s "http://127.0.0.1:$(port_of "$1" http_port)/metrics" |
    awk '/^exaserve_node_generate_requests_total / {print $2}'
}
# Ejections and readmissions so far: a round that straddled either is not a clean measure.
transitions() { grep -cE '"replica (readmitted|ejected: slow)"' "$work/n1.log" || true; }

# While the slow replica is out of routing it gets no request. The gateway evaluates every 2 s
# and readmits a replica back within the factor, which CI's scheduling noise can bring about
# (the healthy replicas' P99 rising); a round that straddled a readmission is tried again.
for attempt in 1 2 3; do
  wait_ejected
  grep '"replica ejected: slow"' "$work/n1.log" | has "\"replica\":\"${slow_node:0:8}/" ||
    fail "the ejected replica is not the slow node's: $(grep ejected "$work/n1.log")"
  kill -0 "${pids[4]}" || fail "the slow node was killed; ejection must only take it out of routing"
  before=$(served 4)
  seen=$(transitions)
  : >"$work/codes"
  clients=()
  for i in $(seq 1 9); do
    curl -s -o /dev/null -w '%{http_code}\n' "$gw/v1/completions" -d '{"prompt":"1+1=","max_tokens":2}' >>"$work/codes" & clients+=($!)
  done
  wait "${clients[@]}"
  [ "$(sort -u "$work/codes")" = 200 ] || fail "requests failed while a replica was ejected: $(sort "$work/codes" | uniq -c)"
  after=$(served 4)
  if [ "$(transitions)" != "$seen" ] || ! ejected; then
    echo "round $attempt: the replica was readmitted meanwhile; again"
    continue
  fi
  [ "$after" = "$before" ] || fail "the ejected replica still got requests"
  echo "slow replica: ejected ($(grep -o '"itl_p99_ms":[0-9.]*,"model_median_ms":[0-9.]*' "$work/n1.log" | head -1))"
  exit 0
done
fail "the slow replica was readmitted during each of 3 rounds"
