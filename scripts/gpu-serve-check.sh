#!/usr/bin/env bash
# gpu-serve-check.sh TOOLS_DIR OUT_DIR [BACKEND]: exaserved alone on BACKEND (default cuda)
# serves the bundled model and answers an OpenAI completion over HTTP with the CPU backend's
# greedy answer ("12+30=" -> "42"). On cuda it also checks the node side of a GPU node: the
# start-up burn-in passed (no taint), gossip metadata carries the GPUs, and `exaserve-cli node
# burn-in` reruns the burn-in (exit 0). Part of scripts/gpu-check.sh; exit 0 when all held.
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: scripts/gpu-serve-check.sh TOOLS_DIR OUT_DIR [cuda|cpu]" >&2
  exit 2
fi
TOOLS=$1 OUT=$2 BACKEND=${3:-cuda}
cd "$(dirname "$0")/.."
DATA=$(mktemp -d)
HTTP=18080
# Python gets the host's libraries, not a prebuilt bundle's (LD_LIBRARY_PATH).
py() { env -u LD_LIBRARY_PATH python3 "$@"; }
EXASERVE_INFERENCE_BACKEND=$BACKEND EXASERVE_INFERENCE_KV_CACHE_BYTES=256Mi \
  "$TOOLS/exaserved" --data-dir "$DATA" --http-port $HTTP --grpc-port 17070 \
  --gossip-port 17946 --bind 127.0.0.1 >"$OUT/daemon.log" 2>&1 &
PID=$!
ok=1
for _ in $(seq 1 120); do
  kill -0 $PID 2>/dev/null || break
  if py -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$HTTP/readyz', timeout=1)" \
    2>/dev/null; then
    ok=0
    break
  fi
  sleep 0.5
done
if [ $ok -eq 0 ]; then
  py - $HTTP <<'PY' || ok=1
import json, sys, urllib.request
req = urllib.request.Request(
    f"http://127.0.0.1:{sys.argv[1]}/v1/completions", method="POST",
    data=json.dumps({"model": "exa-tiny-arith", "prompt": "12+30=", "max_tokens": 8,
                     "temperature": 0}).encode(),
    headers={"Content-Type": "application/json"})
body = json.load(urllib.request.urlopen(req, timeout=30))
print("completion:", json.dumps(body))
sys.exit(0 if body["choices"][0]["text"].strip() == "42" else 1)
PY
else
  echo "exaserved did not become ready on the $BACKEND backend"
fi
if [ $ok -eq 0 ] && [ "$BACKEND" = cuda ]; then
  GRPC=127.0.0.1:17070
  "$TOOLS/exaserve-cli" --addr $GRPC --json members >"$OUT/members.json" || ok=1
  "$TOOLS/exaserve-cli" --addr $GRPC --json replicas >>"$OUT/members.json" || ok=1
  "$TOOLS/exaserve-cli" --addr $GRPC node burn-in >"$OUT/node-burn-in.json" || ok=1
  grep -q '"ready"' "$OUT/members.json" || { echo "the replica is not ready"; ok=1; }
  grep -q 'burn-in-failed' "$OUT/members.json" && { echo "the node is tainted"; ok=1; }
  grep -q '"count": [1-9]' "$OUT/members.json" || { echo "no GPUs in the gossip metadata"; ok=1; }
  grep -q '"GPU burn-in passed"' "$OUT/daemon.log" || { echo "no burn-in at start"; ok=1; }
  # The replica lifecycle on the GPU: a second replica of the model shares its weights and
  # starts; one asking for more than the GPU has is refused by the ledger, naming GPU 0.
  "$TOOLS/exaserve-cli" --addr $GRPC replica start --model "$PWD/models/exa-tiny-arith@v2" \
    --kv-cache-bytes 1Gi --wait >>"$OUT/members.json" 2>&1 || { echo "replica start failed"; ok=1; }
  if "$TOOLS/exaserve-cli" --addr $GRPC replica start --model "$PWD/models/exa-tiny-arith@v3" \
    --memory-budget 1000Gi >>"$OUT/members.json" 2>&1; then
    echo "the ledger admitted 1000Gi"
    ok=1
  fi
  grep -q 'GPU 0: .* needs 1000Gi' "$OUT/members.json" || { echo "no ledger refusal"; ok=1; }
  # GPU memory as the device reports it (NVML), which the memory alert prefers to the ledger:
  # device 0 exported, in use above zero (the replicas' pools at least).
  py -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$HTTP/metrics', timeout=5).read().decode())" \
    >"$OUT/metrics.txt" 2>&1 || ok=1
  grep -E '^exaserve_gpu_device_memory_(used|total)_bytes' "$OUT/metrics.txt"
  grep -qE '^exaserve_gpu_device_memory_used_bytes\{device="0"\} [1-9]' "$OUT/metrics.txt" ||
    { echo "no device memory reading (NVML) on /metrics"; ok=1; }
  cat "$OUT/members.json"
fi
kill -TERM $PID 2>/dev/null
wait $PID 2>/dev/null
tail -n 30 "$OUT/daemon.log"
rm -rf "$DATA"
exit $ok
