#!/usr/bin/env bash
# The spec store's write latency and leader fail-over with real processes (docs/perf/raft.md):
# for 3 and then 5 schedulers on loopback, `exa-raft-history bench` (sequential applies through
# the Raft leader, then through a follower) and REPS × `exa-raft-history failover` (kill -9 of the
# leader → the next write acknowledged through a survivor; the killed node is restarted on its
# data dir before the next repetition). Prints one JSON object; OUT=FILE also writes it there.
#
#   scripts/raft-bench.sh                  # SIZES="3 5" APPLIES=300 REPS=5
# Environment: BIN (build/bin), TOOL (build/test-bin/exa-raft-history; both built when missing),
# BASE_PORT (18000: node i listens on BASE_PORT+10i gRPC, +1 HTTP, +2 gossip).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
TOOL=${TOOL:-build/test-bin/exa-raft-history}
BASE=${BASE_PORT:-18000}
SIZES=${SIZES:-3 5}
APPLIES=${APPLIES:-300}
REPS=${REPS:-5}
if [ ! -x "$BIN/exaserved" ] || [ ! -x "$TOOL" ]; then
  TARGETS="exaserved exaserve-cli exa-raft-history" scripts/build.sh
fi
source test/integration/lib.sh
work=$(mktemp -d)
declare -A node_pid=()
stop_all() { for p in "${node_pid[@]}"; do kill -9 "$p" 2>/dev/null || true; done; node_pid=(); }
trap 'stop_all; rm -rf "$work"' EXIT
trap 'exit 143' TERM INT HUP

grpc_of() { echo "127.0.0.1:$((BASE + 10 * $1))"; }
start_sched() {  # start_sched I: scheduler sI on fixed ports, its data in $work/sI
  local i=$1 join=()
  [ "$i" -gt 1 ] && join=(--join "127.0.0.1:$((BASE + 12))")
  EXASERVE_SCHEDULER_RECONCILE_INTERVAL=200ms "$BIN/exaserved" --node-id "s$i" --role scheduler \
    --data-dir "$work/s$i" --bind 127.0.0.1 --grpc-port "$((BASE + 10 * i))" \
    --http-port "$((BASE + 10 * i + 1))" --gossip-port "$((BASE + 10 * i + 2))" "${join[@]}" \
    >>"$work/s$i.log" 2>&1 &
  node_pid[$i]=$!
}
alive_count() {  # alive_count I: members node I sees alive
  "$BIN/exaserve-cli" --addr "$(grpc_of "$1")" --json members 2>/dev/null |
    python3 -c "import json,sys; print(sum(m['state']=='alive' for m in json.load(sys.stdin)))"
}
all_see() {  # all_see N: every node sees N alive
  local i
  for i in $(seq 1 "$1"); do [ "$(alive_count "$i")" = "$1" ] || return 1; done
}
node_args() {  # --node sI,ADDR,PID for each of N nodes
  local i
  for i in $(seq 1 "$1"); do echo "--node s$i,$(grpc_of "$i"),${node_pid[$i]}"; done
}

bench_size() {  # bench_size N: the JSON for N schedulers on stdout
  local n=$1 i rep killed
  rm -rf "$work"/s*
  for i in $(seq 1 "$n"); do start_sched "$i"; done
  wait_for 60 all_see "$n" || fail "$n schedulers did not all see each other"
  # shellcheck disable=SC2046  # one word per flag and value
  "$TOOL" bench --applies "$APPLIES" $(node_args "$n") >"$work/latency.json" ||
    fail "bench with $n schedulers: $(tail -3 "$work"/s1.log)"
  : >"$work/failover.jsonl"
  for rep in $(seq 1 "$REPS"); do
    # shellcheck disable=SC2046
    "$TOOL" failover $(node_args "$n") >>"$work/failover.jsonl" || fail "failover $rep with $n"
    killed=$(tail -1 "$work/failover.jsonl" | python3 -c "import json,sys; print(json.load(sys.stdin)['killed'])")
    start_sched "${killed#s}"
    wait_for 60 all_see "$n" || fail "$killed did not rejoin after its restart"
  done
  stop_all
  python3 - "$work/latency.json" "$work/failover.jsonl" <<'PY'
import json, statistics, sys
latency = json.load(open(sys.argv[1]))
runs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
ms = [r["failover_ms"] for r in runs]
print(json.dumps({"schedulers": latency["schedulers"], "latency": latency,
                  "failover": {"repetitions": len(ms), "median_ms": statistics.median(ms),
                               "max_ms": max(ms), "min_ms": min(ms), "runs": runs}}))
PY
}

results=()
for n in $SIZES; do results+=("$(bench_size "$n")"); done
json=$(printf '%s\n' "${results[@]}" | python3 -c "
import json,sys,subprocess
runs=[json.loads(l) for l in sys.stdin if l.strip()]
commit=subprocess.run(['git','rev-parse','--short','HEAD'],capture_output=True,text=True).stdout.strip()
print(json.dumps({'commit': commit, 'applies': $APPLIES, 'repetitions': $REPS, 'runs': runs}, indent=1))")
echo "$json"
if [ -n "${OUT:-}" ]; then echo "$json" >"$OUT"; fi
