#!/usr/bin/env bash
# The main job (README): installs dependencies, builds, runs a single-node ExaServe in the
# foreground with the embedded default (every role, the bundled model), answers a prompt over
# gRPC and over the OpenAI API, then keeps serving. Ctrl-C drains and stops.
# QUICKSTART_EXIT=1 stops after the answers (used by the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
# The two binaries the quickstart runs, not the test binaries: the node answers in minutes, not
# after the whole test build (scripts/test.sh builds the rest).
TARGETS="exaserved exaserve-cli" scripts/build.sh
DATA_DIR=${DATA_DIR:-$PWD/.exaserve-data}
HTTP_PORT=${HTTP_PORT:-8080}
GRPC_PORT=${GRPC_PORT:-7070}
GOSSIP_PORT=${GOSSIP_PORT:-7946}
build/bin/exaserved --data-dir "$DATA_DIR" --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" \
  --gossip-port "$GOSSIP_PORT" --log-format text "$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid' INT TERM
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$HTTP_PORT/readyz" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { wait $pid; exit $?; }
  sleep 0.1
done
echo
echo "== Node status (exaserve-cli status)"
build/bin/exaserve-cli --addr "127.0.0.1:$GRPC_PORT" status
echo
echo "== A prompt over gRPC: exaserve-cli generate '1+1='"
build/bin/exaserve-cli --addr "127.0.0.1:$GRPC_PORT" generate "1+1="
echo
echo "== The same model through the OpenAI-compatible API:"
echo "   curl -s http://127.0.0.1:$HTTP_PORT/v1/chat/completions -d '{\"messages\":[{\"role\":\"user\",\"content\":\"123+456=\"}]}'"
curl -s "http://127.0.0.1:$HTTP_PORT/v1/chat/completions" \
  -d '{"messages":[{"role":"user","content":"123+456="}]}'
cat <<MSG

ExaServe is running (pid $pid) with the bundled model exa-tiny-arith, a tiny model that adds
two whole numbers of up to 3 digits, best when they have as many digits (45+55=, 123+456=). It
gets other sums wrong (99+1=, 999+1=) and cannot subtract or multiply.
Try, from another terminal:
  build/bin/exaserve-cli --addr 127.0.0.1:$GRPC_PORT generate "21+21="
  curl -sN http://127.0.0.1:$HTTP_PORT/v1/completions -d '{"prompt":"45+55=","stream":true}'
  curl -s http://127.0.0.1:$HTTP_PORT/v1/models
  curl -s http://127.0.0.1:$HTTP_PORT/metrics | grep exaserve_
  build/bin/exaserve-cli --addr 127.0.0.1:$GRPC_PORT members
  build/bin/exaserve-cli --addr 127.0.0.1:$GRPC_PORT replicas
Press Ctrl-C to drain and stop.
MSG
if [ "${QUICKSTART_EXIT:-0}" = "1" ]; then kill -TERM $pid; fi
wait $pid
