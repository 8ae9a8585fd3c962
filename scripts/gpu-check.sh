#!/usr/bin/env bash
# gpu-check.sh OUTDIR: the CUDA backend's check on a machine with an NVIDIA GPU, in one
# command and under 8 minutes on one H100/H200-class GPU:
#
#   1. builds the CUDA targets (EXASERVE_CUDA=ON) into build-gpu/;
#   2. runs the [gpu] cross-backend tests (CPU vs CUDA per op and on whole models) under
#      compute-sanitizer memcheck when it is installed, plainly otherwise;
#   3. writes a >= 1 B-parameter synthetic bf16 model (Llama-3-8B layer shapes, 4 layers);
#   4. runs `exaserve-bench engine --backend cuda` on it: decode tok/s at batch 1, 16, 64,
#      decode_bw_efficiency against the device copy bandwidth measured in the same run,
#      paged-attention decode GB/s at 2k and 8k context, warm-up and weight load time.
#
# Writes OUTDIR/gpu-check.json (every figure plus pass/fail per goal) and OUTDIR/gpu-check.log.
# Every step has its own timeout, cut to what is left of the 8 minutes; exit 0 only when every
# step ran and every goal held.
#
#   5. exaserved --gpu-inventory and --burn-in; then exaserved itself on the CUDA backend
#      (the bundled model) answering an OpenAI completion over HTTP (gpu-serve-check.sh);
#   6. the [gpu] tests again under compute-sanitizer memcheck, in the time that is left.
#
# Environment: BUILD_DIR (default build-gpu), JOBS (default nproc), MODEL_DIR (default
# OUTDIR/synthetic-1b; reused when it holds a model). GPU_CHECK_PREBUILT=DIR|FILE.tgz skips the
# build: DIR holds bin/ (stripped test_engine_cuda_*, exaserve-bench, exaserved, exaserve-cli) and lib/ (their
# shared libraries other than glibc, libstdc++ and cuBLAS), as scripts/gpu-bundle.sh makes it on
# a Debian 12 build machine; for GPU hosts without the Debian build dependencies.
set -uo pipefail
if [ $# -ne 1 ]; then
  echo "usage: scripts/gpu-check.sh OUTDIR" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
LOG="$OUT/gpu-check.log"
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
MODEL_DIR=${MODEL_DIR:-$OUT/synthetic-1b}
export PATH="$PATH:/usr/local/cuda/bin"
: >"$LOG"
START=$(date +%s)
# The whole check stays under 8 minutes: every step's timeout is cut to what is left of 460 s,
# keeping 20 s for the verdict.
DEADLINE=$((START + 460))

log() { echo "[gpu-check +$(($(date +%s) - START))s] $*" | tee -a "$LOG"; }
# step NAME SECONDS CMD...: runs CMD with a deadline, output to the log; records rc in STEPS.
declare -A STEPS
step() {
  local name=$1 seconds=$2
  shift 2
  local left=$((DEADLINE - $(date +%s)))
  if [ "$left" -lt 5 ]; then
    log "step $name: skipped, the 8-minute budget is spent"
    STEPS[$name]=124
    return 124
  fi
  [ "$seconds" -gt "$left" ] && seconds=$left
  log "step $name (timeout ${seconds}s): $*"
  timeout --kill-after=10 "$seconds" "$@" >>"$LOG" 2>&1
  local rc=$?
  STEPS[$name]=$rc
  log "step $name: rc=$rc"
  return $rc
}

log "host $(hostname), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >>"$LOG" 2>&1
else
  log "nvidia-smi not found"
fi

# 3 (started first, in the background: it needs only the CPU). The >= 1 B-parameter model:
#    hidden 4096, intermediate 14336, 32 heads over 8 KV heads (Llama-3-8B's layer), 4 layers,
#    vocab 32000, untied: 1.13 B parameters, 2.26 GB bf16.
MODEL_PID=""
if [ -f "$MODEL_DIR/model.safetensors" ]; then
  log "reusing $MODEL_DIR"
  STEPS[model]=0
else
  PY=$(command -v python3)
  log "writing the synthetic model in the background ($PY)"
  timeout 200 "$PY" scripts/make-synthetic-model.py "$MODEL_DIR" --layers 4 --hidden 4096 \
    --intermediate 14336 --heads 32 --kv-heads 8 --vocab 32000 --fast >"$OUT/model.log" 2>&1 &
  MODEL_PID=$!
fi

# 1. The binaries: built here (only what the check runs), or a prebuilt bundle.
if [ -n "${GPU_CHECK_PREBUILT:-}" ]; then
  PREBUILT=$GPU_CHECK_PREBUILT
  if [ -f "$PREBUILT" ]; then
    mkdir -p /tmp/exaserve-prebuilt && tar xzf "$PREBUILT" -C /tmp/exaserve-prebuilt
    PREBUILT=/tmp/exaserve-prebuilt
  fi
  BIN="$PREBUILT/bin"
  TOOLS="$PREBUILT/bin"
  # cuBLAS comes from this host's CUDA 13 (the toolkit, or the nvidia-cublas wheel).
  CUBLAS_DIRS=$(find /usr/local/cuda/ /usr/local/cuda*/ /usr/lib /opt -name 'libcublas.so.13*' \
    2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':')
  export LD_LIBRARY_PATH="$PREBUILT/lib:${CUBLAS_DIRS}${LD_LIBRARY_PATH:-}"
  # (Python is run with LD_LIBRARY_PATH unset: the bundle's libssl is not the host's.)
  log "prebuilt binaries in $PREBUILT; LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  for b in "$BIN"/*; do
    missing=$(ldd "$b" 2>&1 | grep 'not found')
    [ -n "$missing" ] && log "$(basename "$b") is missing: $missing"
  done
  STEPS[build]=0
else
  step configure 120 cmake -S . -B "$BUILD_DIR" -G Ninja -DEXASERVE_CUDA=ON
  step build 300 ninja -C "$BUILD_DIR" -j "$JOBS" test_engine_cuda_backend \
    test_engine_cuda_kernels_host test_engine_cuda_cpu_side exaserve-bench exaserved
  BIN="$BUILD_DIR/test-bin"
  TOOLS="$BUILD_DIR/bin"
fi

# 2. The [gpu] tests, plainly (memcheck comes last, in the time that is left).
step kernels_host_test 60 "$BIN/test_engine_cuda_kernels_host"
step gpu_tests 150 "$BIN/test_engine_cuda_backend" --durations yes

# 4. The engine on the GPU.
if [ -n "$MODEL_PID" ]; then
  wait "$MODEL_PID"
  STEPS[model]=$?
  cat "$OUT/model.log" >>"$LOG"
  log "step model: rc=${STEPS[model]}"
fi
BENCH="$OUT/bench.json"
step bench 150 sh -c "'$TOOLS/exaserve-bench' engine --backend cuda --model '$MODEL_DIR' \
  --batch-sizes 1 16 64 --decode-tokens 32 --prefill-tokens 512 --repeats 2 \
  --kv-cache-bytes 1073741824 >'$BENCH'"

# 4b. Where a decode step's device time goes (EXA_CUDA_PROFILE_OPS: an event between ops; the
#     per-op JSON goes to the log). A diagnostic beside the figures above, not one of them.
step op_profile 60 sh -c "EXA_CUDA_PROFILE_OPS=1 '$TOOLS/exaserve-bench' engine --backend cuda \
  --model '$MODEL_DIR' --batch-sizes 1 64 --decode-tokens 32 --prefill-tokens 512 --repeats 1 \
  --kv-cache-bytes 1073741824 >/dev/null"

# 5. The daemon's GPU paths: inventory (NVML), burn-in, and serving on the CUDA backend.
step gpu_inventory 30 sh -c "'$TOOLS/exaserved' --gpu-inventory >'$OUT/inventory.json'"
step burn_in 90 sh -c "'$TOOLS/exaserved' --burn-in >'$OUT/burn-in.json'"
cat "$OUT/inventory.json" "$OUT/burn-in.json" >>"$LOG" 2>/dev/null
step serve_cuda 90 scripts/gpu-serve-check.sh "$TOOLS" "$OUT" cuda

# 6. The [gpu] tests under memcheck, where compute-sanitizer exists and time is left.
if command -v compute-sanitizer >/dev/null; then
  step gpu_tests_memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 \
    --leak-check no "$BIN/test_engine_cuda_backend"
  STEPS[gpu_tests_under_memcheck]=1
else
  log "compute-sanitizer not found: the [gpu] tests ran without memcheck"
  STEPS[gpu_tests_under_memcheck]=0
fi

# The verdict: every step's rc, the bench figures, each goal.
STEPS_JSON=$(for k in "${!STEPS[@]}"; do printf '"%s": %s,' "$k" "${STEPS[$k]}"; done)
env -u LD_LIBRARY_PATH python3 - "$OUT" "{${STEPS_JSON%,}}" "$(($(date +%s) - START))" <<'PY' | tee -a "$LOG"
import json, os, sys
out, steps, seconds = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
bench = {}
try:
    bench = json.load(open(os.path.join(out, "bench.json")))
except Exception as e:  # the bench step failed; its rc says so
    bench = {"error": str(e)}
decode = {d["batch"]: d for d in bench.get("decode", [])}
eff = bench.get("decode_bw_efficiency")
b1 = decode.get(1, {}).get("tokens_per_s")
b64 = decode.get(64, {}).get("tokens_per_s")
speedup = b64 / b1 if b1 and b64 else None
goals = {
    "gpu_tests_pass": steps.get("gpu_tests") == 0,
    "decode_bw_efficiency_ge_0_6": eff is not None and eff >= 0.6,
    "batch64_ge_20x_batch1": speedup is not None and speedup >= 20,
    "under_8_minutes": seconds < 480,
}
steps_ok = all(rc == 0 for name, rc in steps.items() if name != "gpu_tests_under_memcheck")
result = {
    "passed": steps_ok and all(goals.values()),
    "goals": goals,
    "steps_rc": steps,
    "seconds": seconds,
    "decode_bw_efficiency": eff,
    "decode_tokens_per_s": {str(k): v.get("tokens_per_s") for k, v in decode.items()},
    "batch64_vs_batch1": speedup,
    "device_copy_bandwidth_bytes_per_s": bench.get("device_copy_bandwidth_bytes_per_s"),
    "paged_attention_decode": [
        {"context": a["context"], "batch": a["batch"], "gb_per_s": a["bytes_per_s"] / 1e9}
        for a in bench.get("paged_attention", [])],
    "warm_up": bench.get("warm_up"),
    "weight_load_seconds": bench.get("weight_load_seconds"),
    "bench": bench,
}
json.dump(result, open(os.path.join(out, "gpu-check.json"), "w"), indent=2)
print(json.dumps({k: result[k] for k in ("passed", "goals", "steps_rc", "decode_bw_efficiency",
                                           "batch64_vs_batch1", "seconds")}, indent=2))
sys.exit(0 if result["passed"] else 1)
PY
rc=$?
log "done: rc=$rc, JSON in $OUT/gpu-check.json"
exit $rc
