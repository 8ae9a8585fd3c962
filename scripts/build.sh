#!/usr/bin/env bash
# Configures and builds ExaServe into build/ (binaries in build/bin/). Extra arguments go to
# CMake, e.g. scripts/build.sh -DEXASERVE_SANITIZE=address,undefined. TARGETS="exaserved
# exaserve-cli" builds only those (the quickstart's); empty: everything, the tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja "$@" >/dev/null
# shellcheck disable=SC2086  # a space-separated list of ninja targets
ninja -C "$BUILD_DIR" -j "$JOBS" ${TARGETS:-}
