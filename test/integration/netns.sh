# Network namespaces for integration tests (as root; sourced after lib.sh): each exaserved in a
# namespace of its own, joined by a veth pair to a bridge; node I is $prefix.I/24 and listens on
# gRPC 7070, HTTP 8080 and gossip 7946 there; the host is $prefix.254 on the first bridge, so
# the test's own tools reach every node. Names carry the test's pid, so runs never collide.
#
#   netns_require            exit 0 with "SKIP: ..." unless root and `ip netns` work
#   netns_init               sets prefix, netns_bridges=(), netns_nodes=()
#   netns_add_bridge BR      a bridge (the first one gets the host's address)
#   netns_add_node I BR      namespace exa$$-I, veth exh$$-I (host side, on BR) / exp$$-I
#   netns_start I ROLES ARGS...  exaserved node-I in its namespace (envs=(...) set apply; node 1
#                            is the gossip seed of the others); its pid in $work/nI.pid
#   netns_pid I, netns_exec I CMD...
#   netns_hosted I           the replica ids node I's own agent runs (not stopped or failed)
#   netns_cut "I J" "K L"    blackhole routes both ways between the two groups of nodes (the host
#                            still reaches everyone); netns_heal removes every such route
#   netns_cleanup            kills the nodes, removes namespaces, links and bridges
# The nodes run --insecure: the namespaces are a lab network of the test's own
# (docs/security.md#defaults).

netns_require() {
  if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! ip netns add "exa-probe-$$" 2>/dev/null; then
    echo "SKIP: network namespace tests need root and ip netns"
    exit 0
  fi
  ip netns del "exa-probe-$$"
}

netns_init() {
  local tag=$(( $$ % 200 + 20 ))
  net="10.$tag.$(( ($$ / 200) % 250 )).0"
  prefix=${net%.0}
  netns_bridges=()
  netns_nodes=()
}

netns_add_bridge() {
  ip link add "$1" type bridge || return 1
  ip link set "$1" up || return 1
  if [ ${#netns_bridges[@]} -eq 0 ]; then ip addr add "$prefix.254/24" dev "$1" || return 1; fi
  netns_bridges+=("$1")
}

netns_add_node() {
  local i=$1 ns="exa$$-$1"
  ip netns add "$ns" || return 1
  netns_nodes+=("$i")
  ip link add "exh$$-$i" type veth peer name "exp$$-$i" || return 1
  ip link set "exp$$-$i" netns "$ns" || return 1
  ip link set "exh$$-$i" master "$2" || return 1
  ip link set "exh$$-$i" up || return 1
  ip netns exec "$ns" ip addr add "$prefix.$i/24" dev "exp$$-$i" || return 1
  ip netns exec "$ns" ip link set "exp$$-$i" up || return 1
  ip netns exec "$ns" ip link set lo up || return 1
}

netns_exec() { local i=$1; shift; ip netns exec "exa$$-$i" "$@"; }
netns_pid() { cat "$work/n$1.pid"; }

netns_start() {
  local i=$1 roles=$2; shift 2
  local join=()
  [ "$i" -gt 1 ] && join=(--join "$prefix.1:7946")
  rm -f "$work/n$i/endpoints.json"
  ip netns exec "exa$$-$i" env "${envs[@]}" "$BIN/exaserved" --node-id "node-$i" --role "$roles" \
    --data-dir "$work/n$i" --bind "$prefix.$i" --insecure --grpc-port 7070 --http-port 8080 \
    --gossip-port 7946 "${join[@]}" "$@" >>"$work/n$i.log" 2>&1 &
  echo $! >"$work/n$i.pid"
  disown $!  # killed by netns_cleanup: no "Killed" job notices at exit
  wait_for 30 test -s "$work/n$i/endpoints.json" || { tail -5 "$work/n$i.log"; fail "node $i did not start"; }
}

netns_hosted() {
  netns_exec "$1" "$BIN/exaserve-cli" --addr "$prefix.$1:7070" --json replicas --local |
    python3 -c "
import json,sys
for r in json.load(sys.stdin):
    if r['node_id']==sys.argv[1] and r['state'] not in ('stopped','failed'):
        print(r['replica_id'])" "node-$1" | sort
}

netns_cut() {
  local i j
  for i in $1; do
    for j in $2; do
      netns_exec "$i" ip route add blackhole "$prefix.$j/32" || return 1
      netns_exec "$j" ip route add blackhole "$prefix.$i/32" || return 1
    done
  done
}
netns_heal() {
  local i
  for i in "${netns_nodes[@]}"; do netns_exec "$i" ip route flush type blackhole 2>/dev/null || true; done
}

netns_cleanup() {
  local i b
  for i in "${netns_nodes[@]}"; do
    [ -f "$work/n$i.pid" ] && kill -CONT "$(cat "$work/n$i.pid")" 2>/dev/null || true
    [ -f "$work/n$i.pid" ] && kill -9 "$(cat "$work/n$i.pid")" 2>/dev/null || true
  done
  for i in "${netns_nodes[@]}"; do
    ip netns del "exa$$-$i" 2>/dev/null || true
    ip link del "exh$$-$i" 2>/dev/null || true
  done
  for b in "${netns_bridges[@]}"; do ip link del "$b" 2>/dev/null || true; done
}
