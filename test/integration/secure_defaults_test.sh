#!/usr/bin/env bash
# Secure defaults (docs/security.md#defaults), as a new user meets them:
#   1. exaserved with no address flags binds every socket (gRPC, HTTP, gossip TCP and UDP) to
#      loopback only, read from the kernel's tables; it says how to expose it; it made an admin
#      token (mode 0600) in its data dir. Request bodies never reach its log; with
#      metrics.listen, /metrics moves to its own address.
#   2. In a network namespace, bound to a non-loopback address: without a gossip key it exits 2
#      naming --gossip-key-file and --insecure; with --insecure it starts with a warning. With a
#      gossip key it starts and admin RPCs from another host need a token: refused without one
#      (UNAUTHENTICATED, an audit line and a counter), throttled after repeated bad ones
#      (RESOURCE_EXHAUSTED), accepted with the token the node made; exaserve-cli on the node's
#      own host finds that token by itself. A node without the gossip key adds no member.
# Part 2 needs root and `ip netns`; skipped with a message otherwise.
source "$(dirname "$0")/lib.sh"
BIN=$(cd "$1" && pwd)
work=$(mktemp -d)
ns="exasd$$"
host_if="exsh$$"
cleanup() {
  kill_nodes
  [ -f "$work/ns.pid" ] && kill -9 "$(cat "$work/ns.pid")" 2>/dev/null
  # The pid file holds the netns wrapper's pid; the daemon under it is found by its data dir.
  pkill -9 -f -- "--data-dir $work/n " 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  ip link del "$host_if" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cli() { "$BIN/exaserve-cli" --timeout 5s "$@"; }

# addresses PID: "proto address" of every listening TCP / bound UDP socket of the process.
addresses() {
  python3 - "$1" <<'PY'
import os, socket, struct, sys
pid = sys.argv[1]
inodes = set()
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if target.startswith("socket:["):
        inodes.add(target[8:-1])
def address(hex_addr):
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", struct.unpack(">I", raw)[0]))
    words = struct.unpack("<4I", raw)
    return socket.inet_ntop(socket.AF_INET6, struct.pack(">4I", *words))
for table in ("tcp", "tcp6", "udp", "udp6"):
    try:
        lines = open(f"/proc/{pid}/net/{table}").read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        f = line.split()
        if f[9] in inodes and (table.startswith("udp") or f[3] == "0A"):
            host, port = f[1].split(":")
            print(table, address(host), int(port, 16))
PY
}

# 1. The embedded default: no --bind, nothing to join.
"$BIN/exaserved" --data-dir "$work/solo" --http-port 0 --grpc-port 0 --gossip-port 0 \
  --log-format text >"$work/solo.log" 2>&1 &
pids[0]=$!
wait_for 30 test -s "$work/solo/endpoints.json" || { cat "$work/solo.log"; fail "default node not ready"; }
addresses "${pids[0]}" >"$work/solo.sockets"
[ "$(wc -l <"$work/solo.sockets")" -ge 4 ] || fail "expected 4+ sockets: $(cat "$work/solo.sockets")"
while read -r table addr port; do
  case "$addr" in
    127.*|::1|::ffff:127.*) ;;
    *) fail "the default node listens on $addr:$port ($table), not loopback" ;;
  esac
done <"$work/solo.sockets"
grep -q "listening on loopback only" "$work/solo.log" || fail "no line saying how to expose it"
[ "$(stat -c %a "$work/solo/admin.token")" = 600 ] || fail "admin.token is not mode 0600"
echo "ok: the default binds loopback only: $(awk '{printf "%s %s:%s; ", $1, $2, $3}' "$work/solo.sockets")"
# Request bodies never reach the log at the default level, answered or refused.
solo_http="http://127.0.0.1:$(json_field "$work/solo/endpoints.json" http_port)"
marker="canary-$$-prompt"
curl -s -o /dev/null "$solo_http/v1/completions" -d "{\"prompt\":\"$marker 1+1=\",\"max_tokens\":2}"
curl -s -o /dev/null "$solo_http/v1/completions" -d "{\"prompt\":\"$marker\",\"max_tokens\":-1}"
curl -s -o /dev/null "$solo_http/v1/chat/completions" -d "{\"messages\":[{\"role\":\"$marker\"}]}"
curl -s -o /dev/null "$solo_http/v1/completions" -d "{\"prompt\": $marker"
! grep -q "$marker" "$work/solo.log" || fail "a request body reached the log: $(grep "$marker" "$work/solo.log" | head -2)"
echo "ok: four requests with a marker in their bodies, none of it in the log"
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true

# metrics.listen: /metrics on its own address only.
EXASERVE_METRICS_LISTEN=127.0.0.1:0 start_daemon
metrics_port=$(json_field "$work/data/endpoints.json" metrics_port)
[ "$metrics_port" != "$(json_field "$work/data/endpoints.json" http_port)" ] || fail "no port of its own"
code=$(curl -s -o /dev/null -w '%{http_code}' "$http/metrics")
[ "$code" = 404 ] || fail "/metrics on the HTTP port with metrics.listen: $code, want 404"
# Ready a moment after start on a loaded machine: wait for it rather than read it once.
metrics_ready() { curl -sf "http://127.0.0.1:$metrics_port/metrics" | has '^exaserve_ready 1'; }
wait_for 10 metrics_ready || fail "/metrics on metrics.listen"
echo "ok: metrics.listen serves /metrics on its own port ($metrics_port) and not on the HTTP port"
kill "$pid"; wait "$pid" 2>/dev/null || true

# 2. A network namespace with one veth pair: the node on $addr, this host on $peer.
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! ip netns add "$ns" 2>/dev/null; then
  echo "SKIP (part 2): network namespace tests need root and ip netns"
  echo PASS
  exit 0
fi
tag=$(( $$ % 200 + 20 ))
net="10.$tag.$(( ($$ / 200) % 250 ))"
addr="$net.1" peer="$net.254"
if ! { ip link add "$host_if" type veth peer name "exsn$$" &&
       ip link set "exsn$$" netns "$ns" &&
       ip addr add "$peer/24" dev "$host_if" && ip link set "$host_if" up &&
       ip netns exec "$ns" ip addr add "$addr/24" dev "exsn$$" &&
       ip netns exec "$ns" ip link set "exsn$$" up &&
       ip netns exec "$ns" ip link set lo up; } 2>"$work/net.err"; then
  echo "SKIP (part 2): cannot build the test network here: $(head -1 "$work/net.err")"
  echo PASS
  exit 0
fi
in_ns() { ip netns exec "$ns" "$@"; }
node_args=(--data-dir "$work/n" --bind "$addr" --grpc-port 7070 --http-port 8080 --gossip-port 7946
           --log-format text)

set +e
out=$(in_ns "$BIN/exaserved" "${node_args[@]}" 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] || fail "a non-loopback node without a gossip key: exit $rc, want 2: $out"
for want in "--gossip-key-file" "--insecure" "--admin-token-file"; do
  grep -q -- "$want" <<<"$out" || fail "the refusal does not name $want: $out"
done
echo "ok: on $addr without a gossip key: exit 2 naming the flags"

start_ns_node() {  # start_ns_node ARGS...: the node in the namespace, its pid in $work/ns.pid
  in_ns "$BIN/exaserved" "${node_args[@]}" "$@" >"$work/ns.log" 2>&1 &
  echo $! >"$work/ns.pid"
  disown $!  # killed by stop_ns_node or cleanup: no "Killed" job notices
  wait_for 30 test -s "$work/n/endpoints.json" || { cat "$work/ns.log"; fail "the node did not start"; }
}
stop_ns_node() {
  local p; p=$(cat "$work/ns.pid")
  kill -9 "$p" 2>/dev/null || true
  wait_for 10 bash -c "! kill -0 $p" || fail "the node did not stop"
  pkill -9 -f -- "--data-dir $work/n " 2>/dev/null || true
  rm -f "$work/ns.pid" "$work/n/endpoints.json"
}
start_ns_node --insecure
grep -q -- "--insecure: reachable from other hosts" "$work/ns.log" || fail "--insecure without its warning"
echo "ok: --insecure starts, with a warning"
stop_ns_node

cli gossip keygen >"$work/gossip.key"
start_ns_node --gossip-key-file "$work/gossip.key"
token=$(cat "$work/n/admin.token")
calls=("gossip key install $(cli gossip keygen)" "replica stop bundled@local-0 --now")
for call in "${calls[@]}"; do
  set +e
  out=$(cli --addr "$addr:7070" $call 2>&1)
  rc=$?
  set -e
  [ "$rc" != 0 ] && grep -q "(16)" <<<"$out" || fail "'$call' without a token from $peer: exit $rc: $out"
done
grep -q "audit\] admin rpc method=Admin.GossipKey result=refused.*peer=$peer" "$work/ns.log" ||
  fail "no audit line for the refused call: $(grep audit "$work/ns.log" | head -3)"
refused=$(curl -s "http://$addr:8080/metrics" |
  awk '/^exaserve_admin_requests_total\{.*result="refused"/ {s += $2} END {print s + 0}')
[ "$refused" -ge 2 ] || fail "exaserve_admin_requests_total refused: $refused, want 2+"
echo "ok: admin RPCs from $peer without a token: UNAUTHENTICATED, audited, counted ($refused)"
cli --addr "$addr:7070" --token "$token" gossip key install "$(cli gossip keygen)" >/dev/null ||
  fail "the node's own admin token was refused"
grep -q "result=allowed who=local peer=$peer" "$work/ns.log" || fail "no audit line for the allowed call"
in_ns "$BIN/exaserve-cli" --addr "$addr:7070" --data-dir "$work/n" gossip key install \
  "$(cli gossip keygen)" >/dev/null || fail "exaserve-cli on the node's host did not find the token"
echo "ok: the token the node made works from $peer, and on its own host without a flag"

for i in $(seq 1 12); do cli --addr "$addr:7070" --token wrong gossip key install \
  "$(cli gossip keygen)" >"$work/last" 2>&1 || true; done
grep -q "(8)" "$work/last" && grep -q "too many bad admin credentials" "$work/last" ||
  fail "repeated bad tokens were not throttled: $(cat "$work/last")"
echo "ok: 12 bad tokens from one peer: the last ones throttled"

# A node on this host without the gossip key tries to join: it is not added.
"$BIN/exaserved" --data-dir "$work/stranger" --bind "$peer" --insecure --join "$addr:7946" \
  --http-port 0 --grpc-port 0 --gossip-port 0 >"$work/stranger.log" 2>&1 &
pids[1]=$!
disown $!
wait_for 30 test -s "$work/stranger/endpoints.json" || { cat "$work/stranger.log"; fail "stranger"; }
sleep 3
members=$(in_ns "$BIN/exaserve-cli" --addr "$addr:7070" --json members)
[ "$(grep -c '"alive"' <<<"$members")" = 1 ] || fail "a node without the key joined: $members"
drops=$(in_ns curl -s "http://$addr:8080/metrics" |
  awk '/^exaserve_gossip_(decrypt_failures|bad_packets)_total/ {s += $2} END {print s + 0}')
[ "$drops" -ge 1 ] || fail "the stranger's gossip was not seen and dropped"
echo "ok: a node without the gossip key adds no member ($drops packets dropped)"
echo PASS
