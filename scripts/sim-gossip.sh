#!/usr/bin/env bash
# Runs the gossip scenarios of docs/perf/gossip.md for seeds 1-5 through exaserve-sim and prints a
# markdown table (one column per seed). Usage: scripts/sim-gossip.sh [build-dir] [seeds...]
set -euo pipefail
build="${1:-build}"
shift || true
seeds=("$@")
[ ${#seeds[@]} -eq 0 ] && seeds=(1 2 3 4 5)
sim="$build/bin/exaserve-sim"
[ -x "$sim" ] || { echo "sim-gossip: $sim not found; build the exaserve-sim target" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

run() {  # name seed flags...
  local name="$1" seed="$2"
  shift 2
  "$sim" gossip --seed "$seed" "$@" >"$out/$name.$seed.json"
}

for s in "${seeds[@]}"; do
  run kill "$s" --nodes 256 --racks 16 --kill 8 --duration 60
  run loss "$s" --nodes 256 --racks 16 --loss 10% --duration 600
  run n64 "$s" --nodes 64 --duration 120 --update-interval 0
  run n1024 "$s" --nodes 1024 --duration 120 --update-interval 0
  run n64u "$s" --nodes 64 --duration 120 --update-interval 5
  run n1024u "$s" --nodes 1024 --duration 120 --update-interval 5
  run partition "$s" --nodes 256 --racks 16 --partition halves:60 --duration 180
  run pause20 "$s" --nodes 256 --racks 16 --pause 1:20 --duration 90
  run pause90 "$s" --nodes 256 --racks 16 --pause 1:90 --duration 150
done

python3 - "$out" "${seeds[@]}" <<'PY'
import json, sys
out, seeds = sys.argv[1], sys.argv[2:]
def get(name, seed):
    with open(f"{out}/{name}.{seed}.json") as f:
        return json.load(f)
rows = [
    ("N=256 kill 8: suspect_first_s p50", "≤ 2", lambda s: get("kill", s)["suspect_first_s"]["p50"], lambda v: v <= 2),
    ("N=256 kill 8: dead_confirmed_s p99", "≤ 12", lambda s: get("kill", s)["dead_confirmed_s"]["p99"], lambda v: v <= 12),
    ("N=256 kill 8: dead_everywhere_s p99", "(info)", lambda s: get("kill", s)["dead_everywhere_s"]["p99"], None),
    ("N=256 kill 8: dissemination_s p99", "≤ 3", lambda s: get("kill", s)["dissemination_s"]["p99"], lambda v: v <= 3),
    ("N=256 kill 8: false_deaths", "0", lambda s: get("kill", s)["false_deaths"], lambda v: v == 0),
    ("N=256 10% loss 600 s: false_deaths", "0", lambda s: get("loss", s)["false_deaths"], lambda v: v == 0),
    ("N=256 10% loss 600 s: false_suspicions", "(info)", lambda s: get("loss", s)["false_suspicions"], None),
    ("N=256 10% loss 600 s: dissemination_s p99", "(info)", lambda s: get("loss", s)["dissemination_s"]["p99"], None),
    ("msgs_per_node_per_s N=64, no churn", "(info)", lambda s: get("n64", s)["msgs_per_node_per_s"], None),
    ("msgs_per_node_per_s N=1024, no churn", "(info)", lambda s: get("n1024", s)["msgs_per_node_per_s"], None),
    ("msgs ratio N=1024 / N=64, no churn", "0.75–1.25", lambda s: round(get("n1024", s)["msgs_per_node_per_s"] / get("n64", s)["msgs_per_node_per_s"], 3), lambda v: 0.75 <= v <= 1.25),
    ("msgs ratio N=1024 / N=64, 1 update / 5 s", "(info)", lambda s: round(get("n1024u", s)["msgs_per_node_per_s"] / get("n64u", s)["msgs_per_node_per_s"], 3), None),
    ("bytes_per_node_per_s N=256 kill 8", "(info)", lambda s: get("kill", s)["bytes_per_node_per_s"], None),
    ("partition halves 60 s: reconverge_after_heal_s", "≤ 60", lambda s: get("partition", s)["reconverge_after_heal_s"], lambda v: v is not None and v <= 60),
    ("pause 20 s: suspected / dead / back alive", "1 / – / 1", lambda s: "{suspected} / {declared_dead} / {back_alive}".format(**get("pause20", s)["pause"]), lambda v: v.startswith("1 /") and v.endswith("/ 1")),
    ("pause 20 s: back alive after resume (s)", "(info)", lambda s: get("pause20", s)["pause"]["back_alive_s"]["max"], None),
    ("pause 90 s: suspected / dead / back alive", "1 / 1 / 1", lambda s: "{suspected} / {declared_dead} / {back_alive}".format(**get("pause90", s)["pause"]), lambda v: v == "1 / 1 / 1"),
    ("N=256 16 racks: election_agreement", "1.0", lambda s: get("kill", s)["election_agreement"], lambda v: v == 1.0),
    ("  storage per rack (min–max)", "1–1", lambda s: "{min}–{max}".format(**get("kill", s)["election"]["storage_per_rack"]), lambda v: v == "1–1"),
    ("  schedulers (nodes / racks)", "3–12 / ≥ 3", lambda s: "{nodes} / {racks}".format(**get("kill", s)["election"]["roles"]["scheduler"]), lambda v: 3 <= int(v.split(" / ")[0]) <= 12 and int(v.split(" / ")[1]) >= 3),
    ("wall seconds, N=256 10 % loss 600 s", "(info)", lambda s: get("loss", s)["wall_s"], None),
]
print("| scenario | target | " + " | ".join(f"seed {s}" for s in seeds) + " | pass |")
print("|---|---|" + "---|" * len(seeds) + "---|")
ok_all = True
for name, target, f, check in rows:
    vals = [f(s) for s in seeds]
    ok = "" if check is None else ("yes" if all(check(v) for v in vals) else "NO")
    if ok == "NO":
        ok_all = False
    print(f"| {name} | {target} | " + " | ".join(str(v) for v in vals) + f" | {ok} |")
sys.exit(0 if ok_all else 1)
PY
