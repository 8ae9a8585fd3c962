# Shared helpers for integration tests: real exaserved processes on loopback, free ports (0),
# every wait bounded by a deadline.
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

# wait_for DEADLINE_SECONDS COMMAND...: retries COMMAND until it succeeds or time runs out.
wait_for() {
  local deadline=$(( $(date +%s%N) + $1 * 1000000000 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s%N)" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

json_field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
