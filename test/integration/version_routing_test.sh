#!/usr/bin/env bash
# Version routing (docs/architecture.md#routing): one replica relabelled v2 with `exaserve-cli replica label`,
# a route set with `exaserve-cli gateway route`: requests carrying x-model-version: v2 (HTTP
# header or gRPC metadata) reach only that replica, requests without it only the default v1
# replica, an unknown version is a 404 naming it; labels and routes survive a restart; changing
# them needs the admin token when one is configured.
source "$(dirname "$0")/lib.sh"
BIN=$1
CLI="$BIN/exaserve-cli"
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT

admin=$("$CLI" apikey new | awk '/^key:/ {print $2}')
"$CLI" apikey new >/dev/null
echo "$(printf '%s' "$admin" | sha256sum | cut -d' ' -f1)" >"$work/admins"
start() {
  EXASERVE_INFERENCE_REPLICAS_PER_MODEL=2 EXASERVE_INFERENCE_THREADS=1 \
    EXASERVE_ADMIN_TOKEN_FILE="$work/admins" start_daemon
}
start
node=$(json_field "$work/data/endpoints.json" node_id)
r0="${node:0:8}/exa-tiny-arith@v1#0"
r1="${node:0:8}/exa-tiny-arith@v1#1"

"$CLI" --addr "$grpc" replica label --selector "replica=$r1" --version v2 2>/dev/null &&
  fail "relabelling without the admin token was accepted"
export EXASERVE_TOKEN=$admin
out=$("$CLI" --addr "$grpc" replica label --selector "replica=$r1" --version v2)
grep -q "^$r1  version=v2$" <<<"$out" || fail "label output: $out"
# Setting a route fans out to the live gateways in the membership view; 0.9 s after start it once
# found none in CI ("no gateway answered"), so it is retried (it is idempotent) for a while.
wait_for 10 "$CLI" --addr "$grpc" gateway route --header x-model-version --target replica-version \
  --default v1 || fail "gateway route: $("$CLI" --addr "$grpc" gateway route --header \
  x-model-version --target replica-version --default v1 2>&1)"
"$CLI" --addr "$grpc" gateway routes | has "x-model-version -> label version (default v1)" ||
  fail "routes: $("$CLI" --addr "$grpc" gateway routes)"
rc=0; "$CLI" --addr "$grpc" gateway route --header x-model-version --target bogus 2>/dev/null || rc=$?
[ $rc = 2 ] || fail "a bad --target exits $rc, not 2 (usage)"

replica_of() {  # replica_of [--header K=V]: the replica that served one gRPC request
  "$CLI" --addr "$grpc" --json generate --max-tokens 2 "$@" "1+1=" |
    python3 -c "import json,sys; print([j['replica_id'] for j in map(json.loads, sys.stdin) if 'replica_id' in j][0])"
}
# The next load tick carries the label to the router (10 Hz; later on a loaded machine).
v2_routed() { [ "$(replica_of --header x-model-version=v2)" = "$r1" ]; }
check_routing() {
  wait_for 10 v2_routed || fail "v2 requests never reached $r1"
  for i in 1 2 3 4 5 6; do
    [ "$(replica_of --header x-model-version=v2)" = "$r1" ] || fail "v2 request not on $r1"
    [ "$(replica_of)" = "$r0" ] || fail "default request not on the v1 replica $r0"
  done
  code=$(curl -s -o "$work/body" -w '%{http_code}' "$http/v1/completions" \
    -H 'x-model-version: v2' -d '{"prompt":"1+1=","max_tokens":2}')
  [ "$code" = 200 ] || fail "HTTP with x-model-version: v2 -> $code $(cat "$work/body")"
  code=$(curl -s -o "$work/body" -w '%{http_code}' "$http/v1/completions" \
    -H 'x-model-version: v9' -d '{"prompt":"1+1=","max_tokens":2}')
  [ "$code" = 404 ] && grep -q "version=v9" "$work/body" || fail "unknown version -> $code $(cat "$work/body")"
}
check_routing

kill -TERM $pid; wait $pid || true
rm -f "$work/data/endpoints.json"
start
check_routing
echo "version routing: ok"
