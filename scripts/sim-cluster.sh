#!/usr/bin/env bash
# Runs the scheduler scenarios of docs/perf/cluster.md at 256 nodes / 3072 replicas through
# exaserve-sim cluster for the given seeds (default 1 2 3) and prints a markdown table, one
# column per seed. Usage: scripts/sim-cluster.sh [build-dir] [seeds...]
set -euo pipefail
build="${1:-build}"
shift || true
seeds=("$@")
[ ${#seeds[@]} -eq 0 ] && seeds=(1 2 3)
sim="$build/bin/exaserve-sim"
spec="$(dirname "$0")/../config/specs/llama-13b.yaml"
[ -x "$sim" ] || { echo "sim-cluster: $sim not found; build the exaserve-sim target" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

run() {  # name seed nodes scenario
  "$sim" cluster -f "$spec" --nodes "$3" --racks 16 --gpus-per-node 8 --gpu-memory 80Gi \
    --seed "$2" --scenario "$4" >"$out/$1.$2.json"
}

for s in "${seeds[@]}"; do
  run kill256 "$s" 256 kill-8-nodes
  run kill264 "$s" 264 kill-8-nodes
  run blip "$s" 256 blip-20s
  run leader "$s" 256 kill-scheduler-leader
  run rack "$s" 264 rack-partition
done

python3 - "$out" "${seeds[@]}" <<'PY'
import json, sys
out, seeds = sys.argv[1], sys.argv[2:]
def get(name, seed):
    with open(f"{out}/{name}.{seed}.json") as f:
        return json.load(f)
def waves(s):
    return " ".join(str(w["replicas"]) for w in get("kill256", s)["waves"])
def rpn(s):
    r = get("kill256", s)["replicas_per_node"]
    return f'{r["min"]}/{r["median"]}/{r["max"]}'
rows = [
    ("256 nodes: replicas_placed", "3072", lambda s: get("kill256", s)["replicas_placed"], lambda v: v == 3072),
    ("256 nodes: placement_cpu_s", "< 1", lambda s: get("kill256", s)["placement_cpu_s"], lambda v: v < 1),
    ("256 nodes: replicas_per_node min/median/max", "12", rpn, lambda v: v == "12/12/12"),
    ("256 nodes: memory_utilisation", "(info)", lambda s: get("kill256", s)["memory_utilisation"], None),
    ("256 nodes: topology_satisfied", "≥ 0.95", lambda s: get("kill256", s)["topology_satisfied"], lambda v: v >= 0.95),
    ("256 nodes: waves (replicas each)", "256 then 512", waves, lambda v: v.startswith("256 512")),
    ("256 nodes: all_ready_s", "(info)", lambda s: get("kill256", s)["all_ready_s"], None),
    ("kill-8-nodes, 256 nodes: rebuilds before 30 s", "0", lambda s: get("kill256", s)["fault"]["rebuilds"]["before_grace"], lambda v: v == 0),
    ("kill-8-nodes, 256 nodes: rebuilt / lost", "(no room)", lambda s: f'{get("kill256", s)["fault"]["rebuilds"]["count"]} / {get("kill256", s)["fault"]["replicas_on_nodes"]}', None),
    ("kill-8-nodes, 264 nodes: rebuilds before 30 s", "0", lambda s: get("kill264", s)["fault"]["rebuilds"]["before_grace"], lambda v: v == 0),
    ("kill-8-nodes, 264 nodes: rebuilt / lost", "all", lambda s: f'{get("kill264", s)["fault"]["rebuilds"]["count"]} / {get("kill264", s)["fault"]["replicas_on_nodes"]}', lambda v: v.split(" / ")[0] == v.split(" / ")[1]),
    ("kill-8-nodes, 264 nodes: replacements planned (first_prestage_s)", "≥ 30", lambda s: get("kill264", s)["fault"]["first_prestage_s"], lambda v: v >= 30),
    ("kill-8-nodes, 264 nodes: first / last rebuild s", "≥ 30", lambda s: f'{get("kill264", s)["fault"]["rebuilds"]["first_s"]} / {get("kill264", s)["fault"]["rebuilds"]["last_s"]}', lambda v: float(v.split(" / ")[0]) >= 30),
    ("kill-8-nodes, 264 nodes: all ready again s", "(info)", lambda s: get("kill264", s)["fault"]["all_ready_again_s"], None),
    ("blip-20s: rebuilds", "0", lambda s: get("blip", s)["fault"]["rebuilds"]["count"], lambda v: v == 0),
    ("kill-scheduler-leader: takeover_s", "≤ 15", lambda s: get("leader", s)["fault"]["takeover_s"], lambda v: v is not None and v <= 15),
    ("kill-scheduler-leader: duplicate_starts", "0", lambda s: get("leader", s)["duplicate_starts"], lambda v: v == 0),
    ("kill-scheduler-leader: schedulers holding the spec after", "2", lambda s: get("leader", s)["spec_store"]["live_schedulers_holding_specs"], lambda v: v == 2),
    ("kill-scheduler-leader: all_ready_s", "(info)", lambda s: get("leader", s)["all_ready_s"], None),
    ("rack-partition 60 s, 264 nodes: rebuilt / on rack", "(info)", lambda s: f'{get("rack", s)["fault"]["rebuilds"]["count"]} / {get("rack", s)["fault"]["replicas_on_nodes"]}', None),
    ("rack-partition: stale copies stopped after heal", "(info)", lambda s: get("rack", s)["fault"]["stale_replicas_stopped_after_heal"], None),
    ("rack-partition: duplicates_at_end", "0", lambda s: get("rack", s)["duplicates_at_end"], lambda v: v == 0),
    ("wall seconds, kill-8-nodes 256 nodes", "(info)", lambda s: get("kill256", s)["wall_s"], None),
]
print("| scenario | target | " + " | ".join(f"seed {s}" for s in seeds) + " | pass |")
print("|---|---|" + "---|" * len(seeds) + "---|")
for name, target, value, ok in rows:
    vals = [value(s) for s in seeds]
    verdict = "" if ok is None else ("yes" if all(ok(v) for v in vals) else "NO")
    print(f"| {name} | {target} | " + " | ".join(str(v) for v in vals) + f" | {verdict} |")
PY
