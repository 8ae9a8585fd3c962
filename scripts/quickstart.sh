#!/usr/bin/env bash
# The main job (README): installs dependencies, builds, and runs a single-node ExaServe in the
# foreground with the embedded default (every role on this machine). Ctrl-C drains and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
scripts/build.sh
DATA_DIR=${DATA_DIR:-$PWD/.exaserve-data}
HTTP_PORT=${HTTP_PORT:-8080}
GRPC_PORT=${GRPC_PORT:-7070}
build/bin/exaserved --data-dir "$DATA_DIR" --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" \
  --log-format text "$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid' INT TERM
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$HTTP_PORT/readyz" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { wait $pid; exit $?; }
  sleep 0.1
done
cat <<MSG

ExaServe is running (pid $pid). Try, from another terminal:
  curl -s http://127.0.0.1:$HTTP_PORT/healthz
  curl -s http://127.0.0.1:$HTTP_PORT/readyz
  curl -s http://127.0.0.1:$HTTP_PORT/metrics | head
  build/bin/exaserve-cli --addr 127.0.0.1:$GRPC_PORT status

Node status now:
MSG
build/bin/exaserve-cli --addr "127.0.0.1:$GRPC_PORT" status
echo
echo "Press Ctrl-C to drain and stop."
wait $pid
