#!/usr/bin/env bash
# The long Jepsen-style run of the spec store (docs/testing.md#control-plane): the integration
# test test/integration/raft_jepsen_test.sh with FAULT_SECONDS (240) of faults, for 3 and then 5
# schedulers (SIZES). As root, with `ip netns`. Prints one JSON object with each run's figures
# (operations, ok / fail / unknown, faults by kind, violations, checker time); OUT=FILE also
# writes it there. A failing run keeps its history and logs (/tmp/exa-jepsen-<pid>).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_OF_FAULTS=${FAULT_SECONDS:-240}
SIZES=${SIZES:-3 5}
TOOL=build/test-bin/exa-raft-history
if [ ! -x build/bin/exaserved ] || [ ! -x build/bin/exaserve-cli ] || [ ! -x "$TOOL" ]; then
  TARGETS="exaserved exaserve-cli exa-raft-history" scripts/build.sh
fi
runs=()
for n in $SIZES; do
  out=$(mktemp)
  start=$(date +%s)
  EXA_JEPSEN_SCHEDULERS=$n EXA_JEPSEN_SECONDS=$SECONDS_OF_FAULTS EXA_JEPSEN_OUT=$out \
    test/integration/raft_jepsen_test.sh build/bin "$TOOL" >&2
  runs+=("$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['wall_seconds']=int(sys.argv[2]); print(json.dumps(d))" "$out" "$(( $(date +%s) - start ))")")
  rm -f "$out"
done
json=$(printf '%s\n' "${runs[@]}" | python3 -c "
import json,subprocess,sys
commit=subprocess.run(['git','rev-parse','--short','HEAD'],capture_output=True,text=True).stdout.strip()
print(json.dumps({'commit': commit, 'runs': [json.loads(l) for l in sys.stdin if l.strip()]}, indent=1))")
echo "$json"
if [ -n "${OUT:-}" ]; then echo "$json" >"$OUT"; fi
