#!/usr/bin/env bash
# Builds the unit tests (ctest label `unit`) with AddressSanitizer + UndefinedBehaviorSanitizer
# in build-asan and runs them. Any report fails its test: ASan stops at the first error, UBSan
# does not recover (-fno-sanitize-recover=undefined), LeakSanitizer checks every exit. Only the
# unit test binaries are built (not exaserved and the tools), and without CUDA: nvcc code is not
# instrumented (GPU memory checks are compute-sanitizer's job, scripts/gpu-check.sh).
#
#   scripts/sanitize.sh [extra ctest args, e.g. -R config]
#
# Environment: BUILD_DIR (build-asan), JOBS (ninja, nproc), CTEST_JOBS (nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
BUILD_DIR=${BUILD_DIR:-build-asan}
cmake -S . -B "$BUILD_DIR" -G Ninja -DEXASERVE_SANITIZE=address,undefined -DEXASERVE_CUDA=OFF \
  -DCMAKE_C_FLAGS=-fno-sanitize-recover=undefined \
  -DCMAKE_CXX_FLAGS=-fno-sanitize-recover=undefined >/dev/null
# exa_cc_test registers test NAME for target test_NAME; tests with no such target (scripts) need
# no build.
mapfile -t names < <(cd "$BUILD_DIR" && ctest -L unit -N | sed -n 's/^ *Test *#[0-9]*: *//p')
binaries=()
for name in "${names[@]}"; do
  if ninja -C "$BUILD_DIR" -t query "test_$name" >/dev/null 2>&1; then
    binaries+=("test_$name")
  fi
done
ninja -C "$BUILD_DIR" -j "${JOBS:-$(nproc)}" "${binaries[@]}"
built=$(date +%s)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
cd "$BUILD_DIR"
rc=0
ctest -L unit --output-on-failure -j "${CTEST_JOBS:-$(nproc)}" "$@" || rc=$?
end=$(date +%s)
echo "scripts/sanitize.sh: ${#binaries[@]} test binaries; build $((built - start))s," \
  "tests $((end - built))s, total $((end - start))s; ctest exit $rc"
exit "$rc"
