#!/usr/bin/env bash
# What a new user meets first reads right: every sum the quickstart suggests is one the bundled
# model gets right, and the quickstart builds the two binaries it runs before anything else;
# `exaserve-cli` lists the generate prompt once, ends --json output with a newline, aligns the
# members table, names each replica's node, counts a CPU node as CPU (not a GPU) with replicas on
# the inference line only, and takes NAME@VERSION (as it prints) or NAME:VERSION.
source "$(dirname "$0")/lib.sh"
BIN=$1
ROOT=$2
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
cli() { "$BIN/exaserve-cli" --addr "$grpc" "$@"; }

first_build=$(grep -m1 'scripts/build.sh' "$ROOT/scripts/quickstart.sh")
grep -q 'TARGETS="exaserved exaserve-cli"' <<<"$first_build" ||
  fail "quickstart builds everything before serving: $first_build"

# A CPU node with a host memory budget offers it to the scheduler as one device.
EXASERVE_INFERENCE_HOST_MEMORY_BUDGET=1Gi start_daemon

# The sums the quickstart suggests (generate "..", "prompt":"..", "content":".."), each answered.
sed -n '/^Try,/,/^Press/p; /generate "/p; /"content":"/p' "$ROOT/scripts/quickstart.sh" |
  grep -oE '(generate \\?"|"(prompt|content)\\?":\\?")[0-9]+\+[0-9]+=' | grep -oE '[0-9]+\+[0-9]+=' |
  sort -u >"$work/sums"
[ "$(wc -l <"$work/sums")" -ge 3 ] || fail "found too few suggested sums: $(cat "$work/sums")"
while read -r sum; do
  want=$(python3 -c "print(${sum%=})")
  got=$(cli generate --max-tokens 8 "$sum")
  [ "$got" = "$want" ] || fail "the quickstart suggests $sum, which the model answers $got"
done <"$work/sums"

cli generate --help >"$work/help"
[ "$(grep -c 'prompt' "$work/help")" -le 2 ] || fail "generate --help: prompt listed twice: $(cat "$work/help")"
grep -q REQUIRED "$work/help" && fail "generate --help: $(cat "$work/help")"
set +e; cli generate >/dev/null 2>"$work/err"; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "a prompt is required" "$work/err" || fail "generate without a prompt: rc=$rc $(cat "$work/err")"
cli --json generate "1+1=" >"$work/json"
[ "$(tail -c 1 "$work/json" | od -An -c | tr -d ' ')" = '\n' ] || fail "--json generate: no final newline"

for m in exa-tiny-arith@v1 exa-tiny-arith:v1; do
  [ "$(cli generate --model "$m" "2+2=")" = 4 ] || fail "generate --model $m"
done
# Repeatable flags take one value each: the prompt after them stays the prompt.
[ "$(cli generate --stop x --header k=v "2+2=")" = 4 ] || fail "generate --stop x --header k=v PROMPT"
set +e; cli generate --model exa-tiny-arith@v1 --version v2 "2+2=" 2>"$work/err"; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "names version v1, --version says v2" "$work/err" || fail "conflicting versions: rc=$rc $(cat "$work/err")"

# Tables: every row's cells start where the header's do.
aligned() {  # aligned FILE COLUMN...: each COLUMN header's offset holds a cell start in each row
  python3 - "$@" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
header = lines[0]
for col in sys.argv[2:]:
    at = header.index(col)
    for row in lines[1:]:
        assert at == 0 or (row[at - 1] == " " and row[at] != " "), (col, header, row)
PY
}
cli members >"$work/members"
aligned "$work/members" ADDRESS STATE ROLES RACK AGE || fail "members misaligned: $(cat "$work/members")"
cli replicas >"$work/replicas"
node_id=$(json_field "$work/data/endpoints.json" node_id)
head -1 "$work/replicas" | has ' NODE ' || fail "replicas: no NODE column: $(cat "$work/replicas")"
grep -q "$node_id" "$work/replicas" || fail "replicas: the node is not named: $(cat "$work/replicas")"
aligned "$work/replicas" NODE STATE MODEL BACKEND || fail "replicas misaligned: $(cat "$work/replicas")"

cli status >"$work/status"
grep -E '^  (scheduler|gateway|storage|observer) .*replicas' "$work/status" &&
  fail "status repeats replicas on every role line: $(cat "$work/status")"
grep -qE '^  inference .*1 on CPU, 1 replica$' "$work/status" || fail "status inference line: $(cat "$work/status")"
grep -q 'GPUs' "$work/status" && fail "status counts a CPU node as a GPU: $(cat "$work/status")"
echo "new user: ok"
