#!/usr/bin/env bash
# A real exaserved on free ports is healthy, exposes metrics promtool accepts, answers
# exaserve-cli status, refuses bad flags with exit 2, and drains on SIGTERM to exit 0 within 5 s.
source "$(dirname "$0")/lib.sh"
BIN=$1
EXAMPLE_CONFIG=$2
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT

# Bad input: exit 2 with the valid values named.
set +e
out=$("$BIN/exaserved" --role bogus 2>&1); rc=$?
set -e
[ $rc -eq 2 ] || fail "--role bogus exited $rc, want 2"
grep -q "inference, gateway, scheduler, storage, observer" <<<"$out" || fail "no role list: $out"
grep -q "inference, gateway, scheduler, storage, observer" <<<"$("$BIN/exaserved" --help)" ||
  fail "--help does not list the roles"
set +e
"$BIN/exaserved" --no-such-flag >/dev/null 2>&1; rc=$?
printf 'node:\n  rack: [oops\n' > "$work/bad.yaml"
out=$("$BIN/exaserved" --config "$work/bad.yaml" 2>&1); rc2=$?
set -e
[ $rc -eq 2 ] || fail "unknown flag exited $rc, want 2"
[ $rc2 -eq 2 ] || fail "invalid YAML exited $rc2, want 2"
grep -q "$work/bad.yaml:[0-9]*:[0-9]*: invalid YAML" <<<"$out" || fail "no file:line:col: $out"
# Values that would only fail later (or never) are refused up front, naming flag and value.
expect_usage() {  # expect_usage SUBSTRING ARGS...: exit 2 and SUBSTRING on stderr
  local want=$1 out rc
  shift
  set +e; out=$("$@" --print-config 2>&1 >/dev/null); rc=$?; set -e
  [ $rc -eq 2 ] && grep -qF -- "$want" <<<"$out" || fail "$*: exit $rc, want 2 and '$want': $out"
}
expect_usage 'is a directory, not a config file' "$BIN/exaserved" --config "$work"
expect_usage 'network.bind "notanip": expected an IPv4 or IPv6 address' "$BIN/exaserved" --bind notanip
expect_usage 'node.id "bad id/..": expected 1-64' "$BIN/exaserved" --node-id 'bad id/..'
expect_usage 'an IPv6 address goes in brackets' "$BIN/exaserved" --join '::1:7946'
expect_usage 'longer than 100 years' env EXASERVE_LIFECYCLE_DRAIN_TIMEOUT=36500d36500d "$BIN/exaserved"
expect_usage 'expected 1Ki to 1Gi' env EXASERVE_HTTP_MAX_HEADER_BYTES=4Gi "$BIN/exaserved"
# exaserve-cli's own variables in the shell do not stop the daemon.
EXASERVE_TLS_CA=/x EXASERVE_CACHE_DIR=/y "$BIN/exaserved" --print-config >/dev/null ||
  fail "exaserve-cli's environment variables stopped the daemon"

# The example config is complete (every key the daemon knows) and loads.
"$BIN/exaserved" --config "$EXAMPLE_CONFIG" --print-config > "$work/printed.yaml" ||
  fail "config/exaserved.yaml does not load"
keys() { awk '/^[a-z_]+:$/ {s=$1; sub(":","",s)} /^  [a-z_]+:/ {k=$1; sub(":","",k); print s"."k}' "$1" | sort; }
missing=$(comm -23 <(keys "$work/printed.yaml") <(keys "$EXAMPLE_CONFIG"))
[ -z "$missing" ] || fail "config/exaserved.yaml lacks: $missing"

# Data dir not writable → exit 1 naming the path.
if [ "$(id -u)" -ne 0 ]; then
  mkdir -p "$work/ro" && chmod 0555 "$work/ro"
  set +e; out=$("$BIN/exaserved" --data-dir "$work/ro/x" --http-port 0 --grpc-port 0 2>&1); rc=$?; set -e
  [ $rc -eq 1 ] || fail "unwritable data dir exited $rc, want 1"
fi
set +e; out=$("$BIN/exaserved" --data-dir /proc/exaserve --http-port 0 --grpc-port 0 2>&1); rc=$?; set -e
[ $rc -eq 1 ] || fail "data dir under /proc exited $rc, want 1"
grep -q "/proc/exaserve" <<<"$out" || fail "data dir error does not name the path: $out"

# Start on free ports.
"$BIN/exaserved" --data-dir "$work/data" --http-port 0 --grpc-port 0 --log-format json \
  >"$work/log" 2>&1 &
pid=$!
wait_for 10 test -s "$work/data/endpoints.json" || { cat "$work/log"; fail "no endpoints.json"; }
http=$(json_field "$work/data/endpoints.json" http_port)
grpc=$(json_field "$work/data/endpoints.json" grpc_port)

[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http/healthz")" = 200 ] || fail "healthz"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http/readyz")" = 200 ] || fail "readyz"
curl -sf "http://127.0.0.1:$http/metrics" > "$work/metrics"
promtool check metrics < "$work/metrics" || fail "promtool check metrics"
grep -q '^exaserve_build_info{version="' "$work/metrics" || fail "no build info metric"
grep -q '^process_resident_memory_bytes [1-9]' "$work/metrics" || fail "no RSS metric"
grep -q "^exaserve_replica_kv_blocks_capacity{" "$work/metrics" || fail "no replica KV metric"

status=$("$BIN/exaserve-cli" --addr "127.0.0.1:$grpc" --json status)
node_id=$(cat "$work/data/node_id")
grep -q "\"node_id\": \"$node_id\"" <<<"$status" || fail "cli status: $status"
grep -q '"state": "ready"' <<<"$status" || fail "cli state: $status"

# A second daemon on the same ports fails with exit 1 naming the port and flag.
set +e
out=$("$BIN/exaserved" --data-dir "$work/data2" --http-port "$http" --grpc-port 0 2>&1); rc=$?
set -e
[ $rc -eq 1 ] || fail "port in use exited $rc, want 1"
grep -q -- "--http-port" <<<"$out" || fail "port error does not name the flag: $out"
grep -q ":$http" <<<"$out" || fail "port error does not name the port: $out"

# A second daemon on the same data dir would share the node id (and, leaving, mark the live
# node left): exit 1 naming the dir and the holder's pid. SIGHUP is no reason to die.
set +e
out=$("$BIN/exaserved" --data-dir "$work/data" --http-port 0 --grpc-port 0 --gossip-port 0 2>&1); rc=$?
set -e
[ $rc -eq 1 ] || fail "a second daemon on the data dir exited $rc, want 1: $out"
grep -q "data dir $work/data is in use by another exaserved (pid $pid)" <<<"$out" ||
  fail "data dir lock message: $out"
kill -HUP $pid
wait_for 10 grep -q '"msg":"SIGHUP ignored' "$work/log" || fail "SIGHUP not logged"
kill -0 $pid 2>/dev/null || fail "SIGHUP killed the daemon"

# The node id survives a restart: it is kept in the data dir.
start=$(date +%s%N)
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ $rc -eq 0 ] || { cat "$work/log"; fail "exit code after SIGTERM: $rc"; }
[ $elapsed_ms -lt 5000 ] || fail "SIGTERM took ${elapsed_ms} ms"
grep -q '"msg":"draining"' "$work/log" || fail "no drain logged"
"$BIN/exaserved" --data-dir "$work/data" --http-port 0 --grpc-port 0 >"$work/log2" 2>&1 &
pid=$!
wait_for 10 grep -q '"msg":"ready"' "$work/log2" || fail "restart not ready"
grep -q "\"node_id\":\"$node_id\"" "$work/log2" || fail "node id changed across restart"
kill -TERM $pid; wait $pid
echo "daemon smoke: ok (SIGTERM → exit 0 in ${elapsed_ms} ms)"
