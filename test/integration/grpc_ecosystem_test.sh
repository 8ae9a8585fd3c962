#!/usr/bin/env bash
# gRPC tools work on a node without .proto files: server reflection lists and describes its
# services (what grpcurl needs), and grpc.health.v1 answers for each service by name as well as
# overall: SERVING while the node serves, NOT_SERVING once it drains (docs/reference/api.md#grpc-health).
# Skipped (77) without python3-grpcio (scripts/setup-deps.sh installs it).
source "$(dirname "$0")/lib.sh"
BIN=$1
# Debian's python3-grpcio is for /usr/bin/python3, which a python3 first on PATH may not be.
py=
for p in python3 /usr/bin/python3; do "$p" -c "import grpc" 2>/dev/null && { py=$p; break; }; done
[ -n "$py" ] || { echo "SKIP: python3-grpcio is not installed"; exit 77; }
probe="$(dirname "$0")/grpc_probe.py"
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT

# The sim backend (~20 ms a token) keeps a request in flight while the node drains.
EXASERVE_INFERENCE_BACKEND=sim EXASERVE_INFERENCE_KV_CACHE_BYTES=8Gi start_daemon

"$py" "$probe" "$grpc" services >"$work/services" || fail "reflection: list services"
for s in exaserve.v1.Inference exaserve.v1.Admin exaserve.v1.Node grpc.health.v1.Health; do
  grep -qx "$s" "$work/services" || fail "reflection does not list $s: $(cat "$work/services")"
done
"$py" "$probe" "$grpc" describe exaserve.v1.Inference | has "exaserve/v1/inference.proto" ||
  fail "reflection: no descriptor for exaserve.v1.Inference"

health() { "$py" "$probe" "$grpc" health "$@"; }
mapfile -t ours < <(grep '^exaserve\.' "$work/services")
for s in "" "${ours[@]}"; do
  [ "$(health "$s")" = SERVING ] || fail "health of \"$s\": $(health "$s"), want SERVING"
done
[ "$(health exaserve.v1.Nope)" = NOT_FOUND ] || fail "health of an unknown service: $(health exaserve.v1.Nope)"

curl -s -o /dev/null "$http/v1/completions" -d '{"prompt":"1+1=","max_tokens":300}' &
client=$!
running() { curl -s "$http/metrics" | awk '/^exaserve_replica_running_sequences\{/ {s += $2} END {exit !(s >= 1)}'; }
wait_for 10 running || fail "the request did not start"
kill -TERM $pid
for s in "" "${ours[@]}"; do
  wait_for 5 test "$(health "$s")" = NOT_SERVING || fail "health of \"$s\" while draining: $(health "$s")"
done
wait $pid || fail "exit code $? after draining"
pid=
wait $client || true
echo "grpc ecosystem: ok"
