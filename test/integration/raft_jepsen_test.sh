#!/usr/bin/env bash
# The spec store stays linearizable on real scheduler processes under kill -9, SIGSTOP and
# network partitions (docs/testing.md#control-plane). EXA_JEPSEN_SCHEDULERS (3) schedulers, an
# origin + gateway and two CPU inference nodes serving a 2-replica deployment of the bundled
# model, each exaserved in its own network namespace on one bridge (test/integration/netns.sh).
# `exa-raft-history run` drives EXA_JEPSEN_CLIENTS (5) clients from the host, spreading applies,
# deletes and reads of 4 specs over every scheduler, for EXA_JEPSEN_SECONDS (75), while a
# nemesis, one fault at a time with a heal between, kills -9 a scheduler (restarted on its data
# dir), pauses one (SIGSTOP, then SIGCONT), cuts one off, or (with 5) a minority of two — the
# Raft leader half the time, found through exaserve_scheduler_reconciling. After the heal: a
# final read of every key through every scheduler joins the history, and `exa-raft-history
# check` must find 0 violations (every acknowledged write accounted for); every scheduler is
# still the process the test last started; the deployment is whole and, by the inference nodes'
# own agents, no replica id runs on two nodes. The checker must also flag the history with a read
# of a value never written planted in it. Needs root and `ip netns`; skipped with a message otherwise.
# EXA_JEPSEN_OUT=FILE writes the run's figures (JSON) there.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
BIN=$(cd "$1" && pwd)
TOOL=$2
SCHEDULERS=${EXA_JEPSEN_SCHEDULERS:-3}
SECONDS_OF_FAULTS=${EXA_JEPSEN_SECONDS:-75}
CLIENTS=${EXA_JEPSEN_CLIENTS:-5}
KEYS=k0,k1,k2,k3
RANDOM=${EXA_JEPSEN_SEED:-$$}
netns_require
[ -x "$TOOL" ] || fail "no exa-raft-history at '$TOOL' (TARGETS=exa-raft-history scripts/build.sh)"
work=$(mktemp -d)
netns_init
cleanup() {
  local rc=$?
  if [ "$rc" != 0 ] && [ -d "$work" ]; then  # keep the evidence: history, nemesis log, node logs
    keep="${TMPDIR:-/tmp}/exa-jepsen-$$"
    mkdir -p "$keep" && cp "$work"/*.log "$work"/*.jsonl "$work"/*.json "$keep"/ 2>/dev/null
    echo "history and logs kept in $keep" >&2
  fi
  netns_cleanup
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP  # exit through the EXIT trap: no namespace or bridge left
scheds=$(seq 2 $((SCHEDULERS + 1)))
infers="$((SCHEDULERS + 2)) $((SCHEDULERS + 3))"
all_nodes="1 $scheds $infers"
setup_network() {
  netns_add_bridge "exjb$$" || return 1
  for i in $all_nodes; do netns_add_node "$i" "exjb$$" || return 1; done
}
if ! setup_network 2>"$work/netsetup.err"; then
  echo "SKIP: cannot build the test network here: $(head -1 "$work/netsetup.err")"
  exit 0
fi
cli() { "$BIN/exaserve-cli" "$@"; }
model_dir=$(cd "$(dirname "$0")/../../models/exa-tiny-arith" && pwd)
cli model publish --dir "$model_dir" --name exa-tiny-arith --version v1 --origin "$work/origin" \
  --json >/dev/null || fail "publish"
envs=(EXASERVE_LOG_LEVEL=info)
netns_start 1 storage,gateway --origin-dir "$work/origin"
envs=(EXASERVE_LOG_LEVEL=info EXASERVE_SCHEDULER_RECONCILE_INTERVAL=500ms)
start_sched() { netns_start "$1" scheduler; }
for i in $scheds; do start_sched "$i"; done
envs=(EXASERVE_INFERENCE_REPLICAS_PER_MODEL=0 EXASERVE_INFERENCE_HOST_MEMORY_BUDGET=4Gi
      EXASERVE_INFERENCE_THREADS=1 EXASERVE_INFERENCE_KV_CACHE_BYTES=8Mi)
for i in $infers; do netns_start "$i" inference --origin "$prefix.1:7070"; done
total=$(( SCHEDULERS + 3 ))
alive_in() {  # alive_in I: how many members node I sees alive (asked from the host)
  cli --addr "$prefix.$1:7070" --json members |
    python3 -c "import json,sys; print(sum(m['state']=='alive' for m in json.load(sys.stdin)))"
}
all_alive() { local i; for i in $scheds; do [ "$(alive_in "$i")" = "$total" ] || return 1; done; }
wait_for 60 all_alive || fail "members: $(cli --addr "$prefix.2:7070" members)"
addrs=$(for i in $scheds; do printf '%s,' "$prefix.$i:7070"; done); addrs=${addrs%,}

# The deployment whose replicas must each run once at the end (not among the churned keys).
cat >"$work/tiny.yaml" <<YAML
apiVersion: exaserve.io/v1
kind: InferenceReplica
metadata: {name: tiny}
spec:
  model: exa-tiny-arith
  backend: cpu
  replicas: 2
  resources: {gpu: 1}
  scheduling: {batchSize: 2, warmupReplicas: 2}
  deadGrace: 30s
  context: 256
  concurrency: 4
YAML
wait_for 30 cli --addr "$prefix.2:7070" apply -f "$work/tiny.yaml" || fail "apply tiny"
tiny_ready() {
  cli --addr "$prefix.2:7070" --json describe tiny | python3 -c "
import json,sys
d=json.load(sys.stdin); ids=[r['id'] for r in d['replicas']]
sys.exit(0 if len(ids)==2==len(set(ids)) and d['status'].get('ready')==2 else 1)"
}
wait_for 90 tiny_ready || fail "tiny not ready: $(cli --addr "$prefix.2:7070" describe tiny)"

source "$(dirname "$0")/raft_jepsen_nemesis.sh"
"$TOOL" run --addr "$addrs" --keys "$KEYS" --history "$work/history.jsonl" \
  --clients "$CLIENTS" --seconds "$SECONDS_OF_FAULTS" --seed "$RANDOM" >"$work/run.json" &
clients_pid=$!
nemesis_run "$SECONDS_OF_FAULTS"
wait "$clients_pid" || fail "the clients failed: $(cat "$work/run.json")"
nemesis_heal_all
wait_for 60 all_alive || fail "members after the heal: $(cli --addr "$prefix.2:7070" members)"
"$TOOL" final --addr "$addrs" --keys "$KEYS" --history "$work/history.jsonl" >"$work/final.json" ||
  fail "final reads"
rc=0
"$TOOL" check "$work/history.jsonl" >"$work/check.json" || rc=$?
[ "$rc" = 0 ] || fail "linearizability: $(cat "$work/check.json")"
python3 - "$work/check.json" "$SCHEDULERS" <<'PY' || fail "check: $(cat "$work/check.json")"
import json, sys
c = json.load(open(sys.argv[1])); n = int(sys.argv[2])
assert c["violations"] == 0, "violations"
assert c["final_reads"] == 4 * n, f"final reads {c['final_reads']} of {4 * n}"
assert c["ok"] >= 200, f"only {c['ok']} operations acknowledged: no progress"
PY
# The checker can fail: the same history with the first acknowledged read answering a value never
# written (the first, so the search fails before the unknown writes multiply its orderings).
python3 - "$work/history.jsonl" "$work/planted.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
reads = {e["op"] for e in ev if e["type"] == "invoke" and e["f"] == "read"}
first = next(e for e in ev if e["type"] == "ok" and e["op"] in reads)
first["value"], first["version"] = "never-written", 1
open(sys.argv[2], "w").write("".join(json.dumps(e) + "\n" for e in ev))
PY
rc=0
timeout 120 "$TOOL" check "$work/planted.jsonl" >"$work/planted.json" || rc=$?
[ "$rc" = 1 ] && grep -q '"violations":1' "$work/planted.json" ||
  fail "the checker did not flag a read of a value never written (exit $rc): $(cat "$work/planted.json")"

nemesis_check_alive
wait_for 60 tiny_ready || fail "tiny not whole after the faults: $(cli --addr "$prefix.2:7070" describe tiny)"
unique_hosted() {
  local all; all=$(for i in $infers; do netns_hosted "$i"; done)
  [ "$(echo "$all" | grep -c .)" = 2 ] && [ -z "$(echo "$all" | sort | uniq -d)" ]
}
wait_for 30 unique_hosted ||
  fail "a replica id runs twice or is missing: $(for i in $infers; do echo "node-$i: $(netns_hosted "$i" | tr '\n' ' ')"; done)"

summary=$(python3 - "$work/run.json" "$work/check.json" "$work/nemesis.log" "$SCHEDULERS" <<'PY'
import collections, json, sys
run, check = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
faults = collections.Counter(l.split()[1] for l in open(sys.argv[3]) if l.strip())
print(json.dumps({"schedulers": int(sys.argv[4]), "seconds": run["seconds"], "clients": run["clients"],
                  "operations": check["operations"], "ok": check["ok"], "fail": check["fail"],
                  "unknown": check["unknown"], "reads": check["reads"], "writes": check["writes"],
                  "final_reads": check["final_reads"], "faults": sum(faults.values()),
                  "faults_by_kind": dict(faults), "violations": check["violations"],
                  "check_ms": check["check_ms"], "by_outcome": run["by_outcome"]}))
PY
)
echo "jepsen: $summary"
[ -z "${EXA_JEPSEN_OUT:-}" ] || echo "$summary" >"$EXA_JEPSEN_OUT"
echo "ok: raft jepsen ($SCHEDULERS schedulers, ${SECONDS_OF_FAULTS}s of faults)"
