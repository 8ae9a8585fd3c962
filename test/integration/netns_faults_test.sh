#!/usr/bin/env bash
# Network faults with real processes in their own network namespaces: a
# scheduler, an origin + gateway and four CPU inference nodes, each exaserved in a namespace
# joined by a veth pair to its rack's bridge. Rack a (bridge exabr): nodes 1, 2 (scheduler), 5,
# 6; rack b (bridge exbb): nodes 3, 4; the two bridges are joined by an uplink veth pair.
#   1. 5 % loss (EXA_NETNS_LOSS_PERCENT) both ways on every node's link for
#      EXA_NETNS_LOSS_SECONDS (300): no member declared dead anywhere (exaserve_gossip_deaths_total
#      summed over the six nodes) and no replica rebuilt (same ids, nodes, generations). The loss
#      is nftables netdev-ingress rules (numgen random) on both ends of each veth, because
#      sch_netem is missing on many CI kernels; the rules' own counters must show ~5 % dropped.
#      Without nft (scripts/setup-deps.sh installs nftables) the case is skipped with a message.
#   2. A 20 s cut of one inference node rebuilds nothing (SWIM declares it dead, but deadGrace
#      30 s has not passed).
#   3. A 60 s cut rebuilds its replica elsewhere; when it returns (same boot) the stale copy is
#      stopped, so no replica id runs twice — checked with the nodes' own agents, not only the
#      scheduler's view.
#   4. A rack partition: with 4 replicas (one per node), rack b's uplink goes down; rack a
#      declares 3 and 4 dead and rebuilds their replicas on 5 and 6 after deadGrace, while rack
#      b (no scheduler there) keeps its stale copies and starts nothing; after the heal every
#      replica id runs on exactly one node and 4 are ready.
# Each case prints its figures. Needs root and `ip netns`; skipped with a message otherwise. The
# nodes run --insecure: the namespaces are a lab network of the test's own (docs/security.md#defaults).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
BIN=$(cd "$1" && pwd)
netns_require
work=$(mktemp -d)
netns_init
br="exabr$$"   # rack a's switch: nodes 1, 2, 5, 6
brb="exbb$$"   # rack b's switch: nodes 3, 4, joined to rack a's by the uplink exua$$ <-> exub$$
nodes=(1 2 3 4 5 6)
rack_of() { case $1 in 3|4) echo b ;; *) echo a ;; esac; }
cleanup() {
  local rc=$?
  # A failure keeps the nodes' logs (the work dir goes): CI prints where they are.
  if [ "$rc" != 0 ] && [ -d "$work" ]; then
    keep="${TMPDIR:-/tmp}/exa-netns-logs-$$"
    mkdir -p "$keep" && cp "$work"/n*.log "$keep"/ 2>/dev/null &&
      echo "node logs kept in $keep" >&2
  fi
  netns_cleanup  # a namespace's loss table goes with it
  command -v nft >/dev/null && nft delete table netdev "exaloss$$" 2>/dev/null || true
  ip link del "exua$$" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP  # exit through the EXIT trap: no namespace, bridge or rule left
setup_network() {
  netns_add_bridge "$br" || return 1  # the host's address is on rack a's switch
  netns_add_bridge "$brb" || return 1
  ip link add "exua$$" type veth peer name "exub$$" || return 1
  ip link set "exua$$" master "$br" || return 1
  ip link set "exub$$" master "$brb" || return 1
  ip link set "exua$$" up || return 1
  ip link set "exub$$" up || return 1
  for i in "${nodes[@]}"; do
    if [ "$(rack_of "$i")" = b ]; then
      netns_add_node "$i" "$brb" || return 1
    else
      netns_add_node "$i" "$br" || return 1
    fi
  done
}
# A kernel or container without bridges or veth pairs (no CAP_NET_ADMIN): skip, said plainly.
if ! setup_network 2>"$work/netsetup.err"; then
  echo "SKIP: cannot build the test network here: $(head -1 "$work/netsetup.err")"
  exit 0
fi
cli() { "$BIN/exaserve-cli" "$@"; }
# The scheduler's CLI calls run in node 2's namespace (loopback), so a lossy or cut link of the
# test's own making never fails a check that only reads the scheduler's view.
scli() { ip netns exec "exa$$-2" "$BIN/exaserve-cli" --addr "$sched" "$@"; }
# metric I NAME: node I's value of an unlabelled series, read over its own loopback.
metric() {
  ip netns exec "exa$$-$1" curl -sf "http://$prefix.$1:8080/metrics" | awk -v n="$2" '$1 == n {print $2}'
}
# hosted I: the replica ids node I runs (any state but stopped or failed), by its own agent's
# word (`replicas --local` asks node I alone, not the scheduler nor the other members, so a
# partition elsewhere cannot fail it). Not its /metrics: a stopped replica keeps
# exaserve_replica_healthy 1 there.
hosted() { netns_hosted "$1"; }
start() {  # start I ROLES ARGS...: node I in its rack
  local i=$1 roles=$2; shift 2
  netns_start "$i" "$roles" --rack "$(rack_of "$i")" "$@"
}
model_dir=$(cd "$(dirname "$0")/../../models/exa-tiny-arith" && pwd)
cli model publish --dir "$model_dir" --name exa-tiny-arith --version v1 --origin "$work/origin" \
  --json >/dev/null || fail "publish"
envs=(EXASERVE_LOG_LEVEL=info)
start 1 storage,gateway --origin-dir "$work/origin"
start 2 scheduler
envs=(EXASERVE_INFERENCE_REPLICAS_PER_MODEL=0 EXASERVE_INFERENCE_HOST_MEMORY_BUDGET=4Gi
      EXASERVE_INFERENCE_THREADS=1)
for i in 3 4 5 6; do start $i inference --origin "$prefix.1:7070"; done
sched="$prefix.2:7070"
alive_in() {  # alive_in I: how many members node I sees alive
  ip netns exec "exa$$-$1" "$BIN/exaserve-cli" --addr "$prefix.$1:7070" --json members |
    python3 -c "import json,sys; print(sum(m['state']=='alive' for m in json.load(sys.stdin)))"
}
alive6() { [ "$(alive_in 2)" = 6 ]; }
wait_for 30 alive6 || fail "members: $(scli members)"
spec() {  # spec REPLICAS
  cat >"$work/spec.yaml" <<YAML
apiVersion: exaserve.io/v1
kind: InferenceReplica
metadata: {name: tiny}
spec:
  model: exa-tiny-arith
  backend: cpu
  replicas: $1
  resources: {gpu: 1}
  scheduling: {batchSize: 3, warmupReplicas: 3}
  deadGrace: 30s
  context: 256
  concurrency: 4
YAML
  wait_for 10 scli apply -f "$work/spec.yaml" || fail "apply"
}
spec 3
describe() { scli --json describe tiny; }
desired=3
# ready: the scheduler sees $desired replicas present and ready, no id twice.
ready() {
  describe | python3 -c "
import json,sys
d=json.load(sys.stdin); n=int(sys.argv[1])
ids=[r['id'] for r in d['replicas']]
st=d['status']
sys.exit(0 if len(ids)==n==len(set(ids)) and st.get('ready')==n and st.get('present')==n else 1)
" "$desired"
}
wait_for 60 ready || fail "not ready: $(scli describe tiny)"
node_of() { describe | python3 -c "import json,sys; print(sorted(r['node'] for r in json.load(sys.stdin)['replicas'])[$1])"; }
rebuilds() { describe | python3 -c "import json,sys; print(sum('rebuild' in e['message'] for e in json.load(sys.stdin)['events']))"; }
# layout: "id node generation" per replica, sorted: any rebuild changes it.
layout() { describe | python3 -c "
import json,sys
for r in sorted(json.load(sys.stdin)['replicas'], key=lambda r: r['id']):
    print(r['id'], r['node'], r['generation'])"; }
# gossip_sum NAME: exaserve_gossip_NAME summed over all six nodes.
gossip_sum() {
  local t=0 v i
  for i in "${nodes[@]}"; do
    v=$(metric "$i" "exaserve_gossip_$1") || fail "no metrics from node $i"
    t=$(( t + ${v%.*} ))
  done
  echo "$t"
}
placement() { for i in 3 4 5 6; do echo "node-$i: $(hosted "$i" | tr '\n' ' ')"; done; }
# every replica id runs on exactly one node, by the nodes' own word, and $desired of them.
unique_hosted() {
  local all
  all=$(for i in 3 4 5 6; do hosted "$i"; done)
  [ "$(echo "$all" | grep -c .)" = "$desired" ] && [ -z "$(echo "$all" | sort | uniq -d)" ]
}

# 5 % loss, both ways, on every node's link, for EXA_NETNS_LOSS_SECONDS (300): SWIM suspects
# and refutes, but declares no one dead, and the scheduler rebuilds nothing. Made with nftables
# netdev ingress hooks (numgen random) on both ends of each veth: netem is missing on many
# kernels, and an output-hook drop would be an EPERM to the sender, not a loss.
loss_pct=${EXA_NETNS_LOSS_PERCENT:-5}
loss_seconds=${EXA_NETNS_LOSS_SECONDS:-300}
loss_rule="counter; numgen random mod 100 < $loss_pct counter drop;"
loss_on() {
  local devs="" i
  for i in "${nodes[@]}"; do devs+="${devs:+, }exh$$-$i"; done
  nft -f - <<NFT || return 1
table netdev exaloss$$ {
  chain up { type filter hook ingress devices = { $devs } priority -500; policy accept; $loss_rule }
}
NFT
  for i in "${nodes[@]}"; do
    ip netns exec "exa$$-$i" nft -f - <<NFT || return 1
table netdev exaloss {
  chain down { type filter hook ingress device "exp$$-$i" priority -500; policy accept; $loss_rule }
}
NFT
  done
}
loss_off() {
  nft delete table netdev "exaloss$$"
  for i in "${nodes[@]}"; do ip netns exec "exa$$-$i" nft delete table netdev exaloss; done
}
# "seen dropped" summed over the loss chains (first counter: every packet, second: the dropped).
loss_counts() {
  { nft -j list table netdev "exaloss$$"
    for i in "${nodes[@]}"; do ip netns exec "exa$$-$i" nft -j list table netdev exaloss; done
  } | python3 -c "
import json,sys
seen=dropped=0
for line in sys.stdin:
    c=[x['rule']['expr'] for x in json.loads(line)['nftables'] if 'rule' in x]
    for r in c:
        n=[e['counter']['packets'] for e in r if 'counter' in e][0]
        if any('drop' in e for e in r): dropped+=n
        else: seen+=n
print(seen, dropped)"
}
if ! command -v nft >/dev/null; then
  echo "SKIP: $loss_pct % loss needs nft (nftables; scripts/setup-deps.sh installs it)"
elif ! loss_on 2>"$work/loss.err"; then
  echo "SKIP: $loss_pct % loss: nftables netdev ingress unavailable here: $(head -1 "$work/loss.err")"
  loss_off 2>/dev/null || true
else
  layout_before=$(layout)
  deaths0=$(gossip_sum deaths_total)
  suspicions0=$(gossip_sum suspicions_total)
  refutations0=$(gossip_sum refutations_total)
  failed0=$(gossip_sum probes_failed_total)
  loss_start=$(date +%s)
  not_alive=0
  while [ $(( $(date +%s) - loss_start )) -lt "$loss_seconds" ]; do
    sleep 5
    a=$(alive_in 2 2>/dev/null || echo "?")
    [ "$a" = 6 ] || not_alive=$(( not_alive + 1 ))
  done
  read -r seen dropped < <(loss_counts)
  loss_off
  deaths=$(( $(gossip_sum deaths_total) - deaths0 ))
  suspicions=$(( $(gossip_sum suspicions_total) - suspicions0 ))
  refutations=$(( $(gossip_sum refutations_total) - refutations0 ))
  failed=$(( $(gossip_sum probes_failed_total) - failed0 ))
  layout_after=$(layout)
  rebuilt_n=$(diff <(echo "$layout_before") <(echo "$layout_after") | grep -c '^>' || true)
  echo "$loss_pct % loss both ways on every link for ${loss_seconds}s: $dropped of $seen packets" \
    "dropped ($(python3 -c "print(f'{100*$dropped/max($seen,1):.1f}')") %); deaths $deaths," \
    "suspicions $suspicions, refutations $refutations, failed probes $failed," \
    "scheduler saw <6 alive in $not_alive samples, replicas rebuilt $rebuilt_n"
  python3 -c "import sys; sys.exit(0 if $seen > 1000 and abs($dropped/$seen - $loss_pct/100) < 0.02 else 1)" ||
    fail "the loss rules did not drop ~$loss_pct %: $dropped of $seen"
  [ "$deaths" = 0 ] || fail "$deaths false deaths under $loss_pct % loss"
  [ "$rebuilt_n" = 0 ] || fail "replicas rebuilt under $loss_pct % loss: $layout_before -> $layout_after"
  wait_for 30 ready || fail "not ready after the loss: $(scli describe tiny)"
fi

# 20 s cut: lost, not dead past the grace — nothing rebuilt.
victim=$(node_of 0); v=${victim#node-}
ip link set "exh$$-$v" down
sleep 20
ip link set "exh$$-$v" up
sleep 5
[ "$(rebuilds)" = 0 ] || fail "a 20 s cut rebuilt replicas: $(scli describe tiny)"
wait_for 30 ready || fail "not ready after the 20 s cut: $(scli describe tiny)"
echo "20 s cut of $victim: 0 rebuilds"

# After a heal the scheduler stops the stale copy once gossip has the node alive again and its
# channel to the node has reconnected: HTTP/2 keepalive (net::PeerChannelArgs) drops the
# connection lost in the cut within ~7 s and reconnects back off at most 5 s. (Without
# keepalive, stops queued on the old TCP connection in retransmission backoff for up to ~53 s.)
stale_bound=${EXA_NETNS_STALE_SECONDS:-30}

# 60 s cut: dead (≈ 10 s) + deadGrace 30 s < 60 s — rebuilt elsewhere; on return the stale copy
# (lower generation) is stopped.
victim=$(node_of 2); v=${victim#node-}
ip link set "exh$$-$v" down
cut_at=$(date +%s)
rebuilt() { [ "$(rebuilds)" -ge 1 ]; }
wait_for 58 rebuilt || fail "not rebuilt during a 60 s cut: $(scli describe tiny)"
rebuilt_after=$(( $(date +%s) - cut_at ))
[ "$rebuilt_after" -ge 30 ] || fail "rebuilt ${rebuilt_after}s into the cut, before deadGrace"
sleep $(( 60 - ($(date +%s) - cut_at) > 0 ? 60 - ($(date +%s) - cut_at) : 0 ))
ip link set "exh$$-$v" up
healed_at=$(date +%s)
# The scheduler's view (describe) loses the stale copy at once; the node itself may run it until
# the scheduler's stop gets through (see stale_bound), so the nodes are asked too.
wait_for 60 ready || fail "duplicates or not ready after the heal: $(scli describe tiny)"
wait_for "$stale_bound" unique_hosted ||
  fail "a replica runs twice ${stale_bound}s after the heal: $(placement)"
stale_for=$(( $(date +%s) - healed_at ))
echo "60 s cut of $victim: rebuilt after ${rebuilt_after}s; ${stale_for}s after the heal 3 replicas," \
  "each id on one node"

# Rack partition: rack b (nodes 3 and 4, one replica each after scaling to 4) loses its uplink.
# The scheduler (node 2) is in rack a, and the only one: rack b has no scheduler to start
# anything, so its copies just keep running, stale. Rack a declares 3 and 4 dead and, after
# deadGrace, rebuilds their replicas on 5 and 6; on the heal the stale copies in rack b stop
# (lower generation) and every replica id runs once.
desired=4
spec 4
wait_for 60 ready || fail "not ready at 4: $(scli describe tiny)"
in_b() { { hosted 3; hosted 4; } | sort; }
rack_b=$(in_b)
[ "$(echo "$rack_b" | grep -c .)" -ge 2 ] || fail "rack b holds fewer than 2 replicas: $(layout)"
on_rack_a() {  # each of the 4 ids ready on node 5 or 6 (rack b's stale entries stay listed)
  describe | python3 -c "
import json,sys
d=json.load(sys.stdin)
ids={r['id'] for r in d['replicas'] if r['node'] in ('node-5','node-6') and r['phase']=='ready'}
sys.exit(0 if len(ids)==4 and d['status'].get('ready')==4 else 1)"
}
ip link set "exub$$" down
cut_at=$(date +%s)
wait_for 120 on_rack_a || fail "rack b's replicas not rebuilt in rack a: $(scli describe tiny)"
rack_rebuilt_after=$(( $(date +%s) - cut_at ))
[ "$rack_rebuilt_after" -ge 30 ] ||
  fail "rack b rebuilt ${rack_rebuilt_after}s into the cut, before deadGrace"
stale=$(in_b)
[ "$stale" = "$rack_b" ] ||
  fail "rack b changed its replicas while cut off (no scheduler there): '$rack_b' -> '$stale'"
# Rack b's own view is slower than rack a's and is waited for, not read once: every probe from
# rack b fails, so Lifeguard raises its nodes' health score toward 8, stretching their probe
# interval toward 9 s; reaching all four rack-a members then takes up to ~45 s, plus a
# suspicion timeout of up to 24 s (6 x the 4 s minimum) with one peer to confirm it.
rack_b_alone() { [ "$(alive_in 3)" = 2 ]; }
wait_for $(( 90 - ($(date +%s) - cut_at) > 0 ? 90 - ($(date +%s) - cut_at) : 1 )) rack_b_alone ||
  fail "rack b still sees $(alive_in 3) members alive 90 s into the cut, not just its own 2"
b_alone_after=$(( $(date +%s) - cut_at ))
ip link set "exub$$" up
healed_at=$(date +%s)
wait_for 60 ready || fail "duplicates or not ready after the rack heal: $(scli describe tiny)"
wait_for "$stale_bound" unique_hosted ||
  fail "a replica runs twice ${stale_bound}s after the rack heal: $(placement)"
unique_after=$(( $(date +%s) - healed_at ))
wait_for 30 alive6 || fail "members after the rack heal: $(scli members)"
echo "rack b (node-3, node-4: $(echo $rack_b)) cut off: rack b saw only its own 2 alive after" \
  "${b_alone_after}s;" \
  "rebuilt in rack a after ${rack_rebuilt_after}s; ${unique_after}s after the heal 4 replicas," \
  "each id on one node"
echo "ok: network namespace faults"
