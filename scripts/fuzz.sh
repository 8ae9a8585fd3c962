#!/usr/bin/env bash
# Fuzzes one parser (or each in turn) with libFuzzer for SECONDS, starting from a scratch copy of
# its committed corpus (test/fuzz/TARGET/corpus), and prints one JSON line per target:
#   {"target":"http","seconds":600,"execs":1234567,"execs_per_s":2057,"corpus_files":412,"crashes":0}
# A crash, timeout (-timeout=10), leak or out-of-memory (-rss_limit_mb=2048) adds "crash_file",
# the input that reproduces it (rerun: build-fuzz/fuzz/fuzz_TARGET FILE), and the exit status is 1.
#
#   scripts/fuzz.sh TARGET|all SECONDS     TARGET: membership manifest safetensors scheduler
#                                                  tokenizer config http
#
# Builds build-fuzz with clang and EXASERVE_FUZZ=ON first when needed. Long runs belong under
# nice (`nice -n 19 scripts/fuzz.sh all 600`). Environment: BUILD_DIR (build-fuzz), JOBS (2),
# FUZZ_WORK (scratch root; default a new /tmp/exa-fuzz.* dir), FUZZ_ARGS (extra libFuzzer flags).
# docs/fuzzing.md has the recorded runs.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(membership manifest safetensors scheduler tokenizer config http)
usage() {
  echo "usage: scripts/fuzz.sh TARGET|all SECONDS   (TARGET: ${targets[*]})" >&2
  exit 2
}
[ $# -eq 2 ] || usage
[[ "$2" =~ ^[1-9][0-9]*$ ]] || usage
seconds=$2
if [ "$1" = all ]; then
  selected=("${targets[@]}")
elif [[ " ${targets[*]} " == *" $1 "* ]]; then
  selected=("$1")
else
  usage
fi

BUILD_DIR=${BUILD_DIR:-build-fuzz}
# clang and its libFuzzer runtime come from scripts/setup-deps.sh (clang, libclang-rt-dev).
if ! command -v clang++ >/dev/null 2>&1 ||
  ! compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
  scripts/setup-deps.sh >&2
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DEXASERVE_FUZZ=ON \
    -DEXASERVE_BUILD_TESTS=OFF -DEXASERVE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
elif ! grep -q '^EXASERVE_FUZZ:BOOL=ON' "$BUILD_DIR/CMakeCache.txt"; then
  echo "fuzz.sh: $BUILD_DIR is not a fuzz build (EXASERVE_FUZZ=ON, clang); use another BUILD_DIR" >&2
  exit 2
fi
ninja -C "$BUILD_DIR" -j "${JOBS:-2}" "${selected[@]/#/fuzz_}" >&2

work=${FUZZ_WORK:-$(mktemp -d /tmp/exa-fuzz.XXXXXX)}
status=0
for t in "${selected[@]}"; do
  dir="$work/$t"
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp test/fuzz/"$t"/corpus/* "$dir/corpus/"
  extra=()
  [ -f "test/fuzz/$t/$t.dict" ] && extra+=("-dict=test/fuzz/$t/$t.dict")
  start=$(date +%s)
  rc=0
  # shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
  "$BUILD_DIR/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "${extra[@]}" ${FUZZ_ARGS:-} \
    "$dir/corpus" >"$dir/fuzz.log" 2>&1 || rc=$?
  elapsed=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$dir/fuzz.log" | tail -1)
  execs=${execs:-0}
  crash_file=$(find "$dir/artifacts" -type f | sort | head -1)
  crashes=0
  if [ "$rc" -ne 0 ] || [ -n "$crash_file" ]; then crashes=1; fi
  line=$(printf '{"target":"%s","seconds":%d,"execs":%d,"execs_per_s":%d,"corpus_files":%d,"crashes":%d' \
    "$t" "$elapsed" "$execs" $((execs / (elapsed > 0 ? elapsed : 1))) \
    "$(find "$dir/corpus" -type f | wc -l)" "$crashes")
  if [ "$crashes" -eq 1 ]; then
    line+=$(printf ',"crash_file":"%s","log":"%s"' "${crash_file:-none}" "$dir/fuzz.log")
    status=1
  fi
  echo "$line}"
done
exit "$status"
