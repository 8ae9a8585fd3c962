#!/usr/bin/env bash
# The test command (README): installs dependencies, builds, checks style, runs every test.
# Idempotent; this is exactly what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup-deps.sh
scripts/build.sh
scripts/check-style.sh
scripts/check-docs.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" ${CTEST_ARGS:-}
echo "scripts/test.sh: all done in $(( $(date +%s) - start ))s"
