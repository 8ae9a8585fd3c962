#!/usr/bin/env bash
# Runs the release scenarios of docs/perf/releases.md at 256 nodes / 3072 replicas through
# exaserve-sim cluster and prints a markdown table: canary-bad and canary-good
# (config/specs/llama-13b-canary.yaml) for the given seeds (default 1 2), lifetime (24 h + 1 h of
# simulated time, config/specs/llama-13b-lifetime.yaml, first seed; several minutes) and leak
# (6 h, every seed). Usage: scripts/sim-releases.sh [build-dir] [seeds...]
set -euo pipefail
build="${1:-build}"
shift || true
seeds=("$@")
[ ${#seeds[@]} -eq 0 ] && seeds=(1 2)
sim="$build/bin/exaserve-sim"
specs="$(dirname "$0")/../config/specs"
[ -x "$sim" ] || { echo "sim-releases: $sim not found; build the exaserve-sim target" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

run() {  # name seed spec scenario duration
  "$sim" cluster -f "$specs/$3" --nodes 256 --racks 16 --gpus-per-node 8 --gpu-memory 80Gi \
    --seed "$2" --scenario "$4" --duration "$5" >"$out/$1.$2.json"
}

for s in "${seeds[@]}"; do
  run bad "$s" llama-13b-canary.yaml canary-bad 10800
  run good "$s" llama-13b-canary.yaml canary-good 10800
  run leak "$s" llama-13b-lifetime.yaml leak 21600
done
run life "${seeds[0]}" llama-13b-lifetime.yaml lifetime 90000

python3 - "$out" "${seeds[@]}" <<'PY'
import json, sys
out, seeds = sys.argv[1], sys.argv[2:]
def get(name, seed, key):
    with open(f"{out}/{name}.{seed}.json") as f:
        return json.load(f)[key]
def stage1(s):
    m = get("bad", s, "rollout")["decisions"][0]["metrics"][0]
    return f'{m["new"]*1000:.1f} vs {m["old"]*1000:.1f} ms'
rows = [
    ("canary-bad: phase", "rolled-back", lambda s: get("bad", s, "rollout")["phase"], lambda v: v == "rolled-back"),
    ("canary-bad: stages passed", "0", lambda s: get("bad", s, "rollout")["stages_passed"], lambda v: v == 0),
    ("canary-bad: p99 new vs old at stage 1", "(info)", stage1, None),
    ("canary-bad: bad-version replicas ever created", "≤ 12", lambda s: get("bad", s, "rollout")["new_version_replicas_created"], lambda v: v <= 12),
    ("canary-bad: rolled back after (s)", "(info)", lambda s: get("bad", s, "rollout")["end_s"], None),
    ("canary-bad: min availability", "≥ 0.99", lambda s: get("bad", s, "rollout")["min_availability"], lambda v: v >= 0.99),
    ("canary-bad: memory over-commits", "0", lambda s: get("bad", s, "rollout")["memory_overcommits"], lambda v: v == 0),
    ("canary-good: phase", "succeeded", lambda s: get("good", s, "rollout")["phase"], lambda v: v == "succeeded"),
    ("canary-good: stages passed", "4", lambda s: get("good", s, "rollout")["stages_passed"], lambda v: v == 4),
    ("canary-good: completed after (s)", "(info)", lambda s: get("good", s, "rollout")["end_s"], None),
    ("canary-good: min availability", "≥ 0.99", lambda s: get("good", s, "rollout")["min_availability"], lambda v: v >= 0.99),
    ("canary-good: memory over-commits", "0", lambda s: get("good", s, "rollout")["memory_overcommits"], lambda v: v == 0),
    ("leak: only the leaking replica flagged", "true", lambda s: get("leak", s, "leak")["only_the_leaking_replica_flagged"], lambda v: v is True),
    ("leak: flagged after (h)", "(info)", lambda s: list(get("leak", s, "leak")["flagged_at_h"].values()), None),
    ("leak: replaced (stops and surge copies for it)", "1", lambda s: get("leak", s, "leak")["leak_restarts"], lambda v: v == 1),
    ("leak: replaced after (h)", "(info)", lambda s: get("leak", s, "leak")["replaced_at_h"], None),
    ("leak: its generation before / at the end", "n / n+1", lambda s: f'{get("leak", s, "leak")["leaking_generation"]} / {get("leak", s, "leak")["generation_now"]}', lambda v: int(v.split(" / ")[1]) == int(v.split(" / ")[0]) + 1),
]
life_rows = [
    ("lifetime 24 h: replicas restarted once / more than once", "3072 / 0", lambda l: f'{l["replicas_restarted_once"]} / {l["replicas_restarted_more_than_once"]}', lambda v: v == "3072 / 0"),
    ("lifetime 24 h: most out of service at once (maxUnavailable)", "≤ 30", lambda l: f'{l["max_out_of_service"]} ({l["max_unavailable"]})', lambda v: int(v.split()[0]) <= 30),
    ("lifetime 24 h: min availability", "≥ 0.99", lambda l: l["min_availability"], lambda v: v >= 0.99),
    ("lifetime 24 h: restarts per hour over 25 h", "(info)", lambda l: l["restarts_per_hour"], None),
    ("lifetime 24 h: first / last restart (h)", "(info)", lambda l: f'{l["first_restart_h"]} / {l["last_restart_h"]}', None),
    ("lifetime 24 h: memory over-commits", "0", lambda l: l["memory_overcommits"], lambda v: v == 0),
]
print("| scenario | target | " + " | ".join(f"seed {s}" for s in seeds) + " | pass |")
print("|---|---|" + "---|" * len(seeds) + "---|")
for name, target, f, ok in rows:
    vals = [f(s) for s in seeds]
    p = "" if ok is None else ("yes" if all(ok(v) for v in vals) else "NO")
    print(f"| {name} | {target} | " + " | ".join(str(v) for v in vals) + f" | {p} |")
life = get("life", seeds[0], "lifetime")
for name, target, f, ok in life_rows:
    v = f(life)
    p = "" if ok is None else ("yes" if ok(v) else "NO")
    print(f"| {name} | {target} | {v}" + " |" * len(seeds) + f" {p} |")
PY
