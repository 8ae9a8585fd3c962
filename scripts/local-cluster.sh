#!/usr/bin/env bash
# A local ExaServe cluster on loopback: real exaserved processes, the distributed mode on one
# machine (README "Try the distributed mode").
#
#   scripts/local-cluster.sh up [N]   start N nodes (default 6, at least 4): node 1 storage (the
#                                     origin, with the bundled model published) + gateway +
#                                     observer (alerts: exaserve-cli alerts),
#                                     node 2 (and 3, 4 when N >= 8) scheduler, the rest inference
#                                     (CPU, 4Gi host memory budget each); then applies
#                                     config/specs/local-tiny.yaml and waits for its replicas
#   scripts/local-cluster.sh status   members, the spec and where its replicas run
#   scripts/local-cluster.sh down     stops every node (SIGTERM: they drain)
#
# Environment: CLUSTER_DIR (default .exaserve-cluster: data, logs/nodeN.log, pids),
# BASE_PORT (default 17000: node i listens on BASE_PORT+10i gRPC, +1 HTTP, +2 gossip),
# BIN (default build/bin; built with scripts/build.sh when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${CLUSTER_DIR:-$PWD/.exaserve-cluster}
BASE=${BASE_PORT:-17000}
BIN=${BIN:-build/bin}
grpc_port() { echo $((BASE + 10 * $1)); }
http_port() { echo $((BASE + 10 * $1 + 1)); }
gossip_port() { echo $((BASE + 10 * $1 + 2)); }
cli() { "$BIN/exaserve-cli" "$@"; }

usage() {
  echo "usage: $0 up [N] | status | down" >&2
  exit 2
}

start() {  # start I ROLES [ARGS...]
  local i=$1 roles=$2; shift 2
  mkdir -p "$DIR/n$i" "$DIR/logs"
  local join=()
  [ "$i" -gt 1 ] && join=(--join "127.0.0.1:$(gossip_port 1)")
  "$BIN/exaserved" --node-id "node-$i" --role "$roles" --data-dir "$DIR/n$i" --bind 127.0.0.1 \
    --grpc-port "$(grpc_port "$i")" --http-port "$(http_port "$i")" \
    --gossip-port "$(gossip_port "$i")" "${join[@]}" "$@" >>"$DIR/logs/node$i.log" 2>&1 &
  echo $! >"$DIR/n$i.pid"
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$(http_port "$i")/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$DIR/n$i.pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "node $i did not start; its log: $DIR/logs/node$i.log" >&2
  tail -5 "$DIR/logs/node$i.log" >&2
  exit 1
}

up() {
  local n=${1:-6}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 4 ] && [ "$n" -le 64 ] ||
    { echo "up: N must be 4-64, got '$n'" >&2; exit 2; }
  [ -x "$BIN/exaserved" ] || scripts/build.sh
  if ls "$DIR"/n*.pid >/dev/null 2>&1; then
    echo "a cluster is already up in $DIR ($0 down first)" >&2
    exit 1
  fi
  mkdir -p "$DIR"
  if [ ! -d "$DIR/origin/exa-tiny-arith" ]; then
    cli model publish --dir models/exa-tiny-arith --name exa-tiny-arith --version v1 \
      --origin "$DIR/origin" >/dev/null
  fi
  local schedulers=1
  [ "$n" -ge 8 ] && schedulers=3
  start 1 storage,gateway,observer --origin-dir "$DIR/origin"
  for i in $(seq 2 $((1 + schedulers))); do start "$i" scheduler; done
  local inference=$((n - 1 - schedulers))
  for i in $(seq $((2 + schedulers)) "$n"); do
    EXASERVE_INFERENCE_REPLICAS_PER_MODEL=0 EXASERVE_INFERENCE_HOST_MEMORY_BUDGET=4Gi \
      EXASERVE_INFERENCE_THREADS=1 start "$i" inference --origin "127.0.0.1:$(grpc_port 1)"
  done
  echo "$n nodes up: 1 storage+gateway+observer, $schedulers scheduler(s), $inference inference"
  local spec="$DIR/local-tiny.yaml"
  sed "s/replicas: 3/replicas: $inference/" config/specs/local-tiny.yaml >"$spec"
  for _ in $(seq 1 50); do
    cli --addr "127.0.0.1:$(grpc_port 2)" apply -f "$spec" >/dev/null 2>&1 && break
    sleep 0.2
  done
  cli --addr "127.0.0.1:$(grpc_port 2)" get
  local ready=0
  for _ in $(seq 1 120); do
    ready=$(cli --addr "127.0.0.1:$(grpc_port 2)" --json describe local-tiny |
      python3 -c "import json,sys; print(json.load(sys.stdin)['status'].get('ready', 0))")
    [ "$ready" = "$inference" ] && break
    sleep 0.5
  done
  echo "local-tiny: $ready of $inference replicas ready"
  echo
  echo "Try:"
  echo "  curl -s http://127.0.0.1:$(http_port 1)/v1/completions -d '{\"model\":\"exa-tiny-arith\",\"prompt\":\"12+30=\",\"max_tokens\":4}'"
  echo "  $BIN/exaserve-cli --addr 127.0.0.1:$(grpc_port 2) describe local-tiny"
  echo "  $0 status | $0 down      (logs: $DIR/logs)"
  [ "$ready" = "$inference" ]
}

status() {
  [ -f "$DIR/n1.pid" ] || { echo "no cluster in $DIR" >&2; exit 1; }
  cli --addr "127.0.0.1:$(grpc_port 1)" members
  echo
  cli --addr "127.0.0.1:$(grpc_port 2)" get
  echo
  cli --addr "127.0.0.1:$(grpc_port 2)" describe local-tiny
  echo
  cli --addr "127.0.0.1:$(grpc_port 1)" alerts || true
}

down() {
  local pids=()
  for f in "$DIR"/n*.pid; do
    [ -f "$f" ] || continue
    pids+=("$(cat "$f")")
    rm -f "$f"
  done
  [ ${#pids[@]} -gt 0 ] || { echo "no cluster in $DIR"; return 0; }
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 1 100); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  echo "stopped ${#pids[@]} nodes (data and logs kept in $DIR)"
}

case "${1:-}" in
  up) up "${2:-6}" ;;
  status) status ;;
  down) down ;;
  *) usage ;;
esac
