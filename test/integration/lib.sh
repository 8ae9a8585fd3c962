# Shared helpers for integration tests: real exaserved processes on loopback, free ports (0),
# every wait bounded by a deadline.
set -euo pipefail

# fail MESSAGE: the test fails, printing any daemon crash report its logs under $work hold
# (docs/operations.md#crash-reports).
fail() {
  echo "FAIL: $*" >&2
  print_crash_reports >&2
  exit 1
}
print_crash_reports() {
  [ -n "${work:-}" ] && [ -d "$work" ] || return 0
  local f mark='^[*][*][*] SIG[A-Z]+ received'
  while IFS= read -r f; do
    echo "--- crash report in ${f#"$work"/}:"
    awk -v mark="$mark" '$0 ~ mark { p = 1 } p && n++ < 80' "$f"
  done < <(grep -rlaE --include='*log*' "$mark" "$work" 2>/dev/null || true)
}
# A test that dies of a failed command (set -e), not through fail, prints them too; -E makes
# functions and command substitutions inherit the trap. Only log files are searched ($work may
# hold model weights), so a command failing on purpose costs little.
set -E
trap 'print_crash_reports >&2' ERR

# `cmd | has PATTERN` is `cmd | grep -q PATTERN` that reads all of cmd's output first: grep -q
# exits at its first match, and under pipefail the writer's SIGPIPE would fail the pipeline.
has() { local all; all=$(cat); grep -q "$@" <<<"$all"; }

# wait_for DEADLINE_SECONDS COMMAND...: retries COMMAND until it succeeds or time runs out.
wait_for() {
  local deadline=$(( $(date +%s%N) + $1 * 1000000000 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s%N)" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

json_field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

# start_daemon: one exaserved on loopback with free ports, data in $work/data, log in $work/log
# (environment variables set on the call apply). Sets pid, http (base URL) and grpc (host:port).
start_daemon() {
  "$BIN/exaserved" --data-dir "$work/data" --bind 127.0.0.1 --http-port 0 --grpc-port 0 \
    --gossip-port 0 "$@" >"$work/log" 2>&1 &
  pid=$!
  wait_for 30 test -s "$work/data/endpoints.json" || { cat "$work/log"; fail "not ready"; }
  http="http://127.0.0.1:$(json_field "$work/data/endpoints.json" http_port)"
  grpc="127.0.0.1:$(json_field "$work/data/endpoints.json" grpc_port)"
}

# Multi-node tests: node N keeps its data in $work/nN and its log in $work/nN.log; pids[N] is its
# process. start_node N ARGS... starts one (environment variables set on the call apply) and
# waits for it; port_of N FIELD reads endpoints.json (http_port, grpc_port, gossip_port,
# node_id); kill_nodes kills them all (for the EXIT trap).
pids=()
start_node() {
  local n=$1; shift
  "$BIN/exaserved" --data-dir "$work/n$n" --bind 127.0.0.1 --http-port 0 --grpc-port 0 \
    --gossip-port 0 "$@" >>"$work/n$n.log" 2>&1 &
  pids[$n]=$!
  wait_for 30 test -s "$work/n$n/endpoints.json" || { cat "$work/n$n.log"; fail "node $n did not start"; }
}
port_of() { json_field "$work/n$1/endpoints.json" "$2"; }

# start_silent_peer: a TCP listener on loopback that accepts connections and never says a word
# (a hung process, a wrong service). Sets pid and silent (host:port); kill $pid when done.
start_silent_peer() {
  local file; file=$(mktemp)
  python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
held = []
while True:
    c, _ = s.accept(); held.append(c)
' "$file" &
  pid=$!
  wait_for 10 test -s "$file" || fail "silent peer did not start"
  silent="127.0.0.1:$(cat "$file")"
  rm -f "$file"
}
kill_nodes() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }

# tiny_spec REPLICAS BATCH WARMUP DEADGRACE: an InferenceReplica spec "tiny" of the bundled model
# on CPU nodes (one GPU-equivalent device each), for the scheduler's tests.
tiny_spec() {
  cat <<YAML
apiVersion: exaserve.io/v1
kind: InferenceReplica
metadata: {name: tiny}
spec:
  model: exa-tiny-arith
  version: v1
  backend: cpu
  replicas: $1
  resources: {gpu: 1}
  scheduling: {batchSize: $2, warmupReplicas: $3}
  deadGrace: $4
  context: 256
  concurrency: 4
YAML
}

# Scheduler-driven clusters (rollout_test, leak_test). Each sets shell variables the test uses.
# publish_tiny VERSION...: the bundled model published as each version into $work/origin.
publish_tiny() {
  local model_dir v
  model_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../models/exa-tiny-arith" && pwd)
  for v in "$@"; do
    "$BIN/exaserve-cli" model publish --dir "$model_dir" --name exa-tiny-arith --version "$v" \
      --origin "$work/origin" --json >/dev/null || fail "publish $v"
  done
}
# start_control_plane: node 1 serves $work/origin and is the gateway, node 2 the scheduler
# (reconciling every 500 ms; environment variables set on the call reach both, and only the
# scheduler reads scheduler.*). Sets seed (the gossip address to join), origin (node 1's gRPC
# address), sched and gateway.
start_control_plane() {
  start_node 1 --role storage,gateway --origin-dir "$work/origin"
  seed="127.0.0.1:$(port_of 1 gossip_port)"
  origin="127.0.0.1:$(port_of 1 grpc_port)"
  gateway="http://127.0.0.1:$(port_of 1 http_port)"
  EXASERVE_SCHEDULER_RECONCILE_INTERVAL=${EXASERVE_SCHEDULER_RECONCILE_INTERVAL:-500ms} \
    start_node 2 --role scheduler --join "$seed" --node-id sched
  sched="127.0.0.1:$(port_of 2 grpc_port)"
}
# members_up N: the scheduler sees N members alive.
members_up() {
  "$BIN/exaserve-cli" --addr "$sched" --json members | python3 -c "import json,sys
sys.exit(0 if sum(m['state'] == 'alive' for m in json.load(sys.stdin)) == int(sys.argv[1]) else 1)" "$1"
}
# start_traffic: three clients sending completions through the gateway until killed; their pids
# in traffic[].
traffic=()
start_traffic() {
  local i
  for i in 1 2 3; do
    ( while true; do
        curl -s -o /dev/null --max-time 10 "$gateway/v1/completions" \
          -d '{"model":"exa-tiny-arith","prompt":"12+30=","max_tokens":24,"temperature":0}' || true
      done ) &
    traffic+=($!)
  done
}
