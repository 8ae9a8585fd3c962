#!/usr/bin/env bash
# With an API key file, the public API (HTTP and gRPC) needs a known key and says so with 401 /
# UNAUTHENTICATED; /healthz, /readyz and /metrics stay open; with an admin token file, keyring
# changes need the admin token while read-only admin calls stay open.
source "$(dirname "$0")/lib.sh"
BIN=$1
CLI="$BIN/exaserve-cli"
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT

"$CLI" apikey new > "$work/k1"
"$CLI" apikey new > "$work/admin"
key=$(awk '/^key:/ {print $2}' "$work/k1")
admin=$(awk '/^key:/ {print $2}' "$work/admin")
{ echo "# test keys"; echo "alice: $(awk '/^hash:/ {print $2}' "$work/k1")"; } > "$work/keys"
awk '/^hash:/ {print "ops: " $2}' "$work/admin" > "$work/admins"

EXASERVE_GATEWAY_API_KEYS_FILE="$work/keys" EXASERVE_ADMIN_TOKEN_FILE="$work/admins" start_daemon

code=$(curl -s -o "$work/body" -w '%{http_code}' "$http/v1/completions" -d '{"prompt":"1+1="}')
[ "$code" = 401 ] && grep -q "missing Authorization header" "$work/body" || fail "no key: $code $(cat "$work/body")"
code=$(curl -s -o "$work/body" -w '%{http_code}' -H "Authorization: Bearer wrong" "$http/v1/models")
[ "$code" = 401 ] && grep -q "invalid API key" "$work/body" || fail "bad key: $code"
code=$(curl -s -o "$work/body" -w '%{http_code}' -H "Authorization: Bearer $key" "$http/v1/completions" -d '{"prompt":"1+1="}')
[ "$code" = 200 ] && grep -q '"text":"2"' "$work/body" || fail "good key: $code $(cat "$work/body")"
for path in /healthz /readyz /metrics; do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$http$path")" = 200 ] || fail "$path not open"
done

set +e
"$CLI" --addr "$grpc" generate "1+1=" 2>"$work/err"; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "missing Authorization header" "$work/err" || fail "grpc without key: rc=$rc $(cat "$work/err")"
[ "$("$CLI" --addr "$grpc" --token "$key" generate "1+1=")" = 2 ] || fail "grpc with key"

newkey=$("$CLI" gossip keygen)
set +e
"$CLI" --addr "$grpc" gossip key install "$newkey" 2>"$work/err"; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "admin token" "$work/err" || fail "admin op without token: rc=$rc"
# An API key is not an admin token, and the refusal says which secret it wanted.
set +e
"$CLI" --addr "$grpc" --token "$key" gossip key install "$newkey" 2>"$work/err"; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "invalid admin token" "$work/err" && ! grep -q "API key" "$work/err" ||
  fail "admin op with an API key: rc=$rc $(cat "$work/err")"
EXASERVE_TOKEN="$admin" "$CLI" --addr "$grpc" gossip key install "$newkey" >/dev/null ||
  fail "admin op with token"
"$CLI" --addr "$grpc" status >/dev/null || fail "status should stay open"
kill -TERM $pid; wait $pid; pid=
echo "auth: ok"
