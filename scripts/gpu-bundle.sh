#!/usr/bin/env bash
# gpu-bundle.sh [BUILD_DIR] [OUT.tgz]: packs what scripts/gpu-check.sh runs (the [gpu] test
# binaries, exaserve-bench, exaserved, exaserve-cli; stripped) with their shared libraries other than glibc,
# libstdc++ and cuBLAS, for a GPU host that lacks the Debian build dependencies:
#   GPU_CHECK_PREBUILT=OUT.tgz scripts/gpu-check.sh OUTDIR
# Defaults: build, .gpu-bundle/bundle.tgz (git-ignored through .git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
TARBALL=${2:-.gpu-bundle/bundle.tgz}
ninja -C "$BUILD_DIR" test_engine_cuda_backend test_engine_cuda_kernels_host \
  test_engine_cuda_cpu_side exaserve-bench exaserved exaserve-cli >/dev/null
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" "$(dirname "$TARBALL")"
for b in "$BUILD_DIR"/test-bin/test_engine_cuda_{backend,kernels_host,cpu_side} \
  "$BUILD_DIR"/bin/exaserve-bench "$BUILD_DIR"/bin/exaserved "$BUILD_DIR"/bin/exaserve-cli; do
  strip -o "$STAGE/bin/$(basename "$b")" "$b"
done
ldd "$STAGE"/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libcublas|libcublasLt|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done
tar czf "$TARBALL" -C "$STAGE" bin lib
echo "$TARBALL: $(du -h "$TARBALL" | cut -f1), $(ls "$STAGE/lib" | wc -l) libraries"
