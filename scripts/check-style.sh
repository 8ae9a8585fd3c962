#!/usr/bin/env bash
# Style gate: clang-format (Google base, 100 columns, .clang-format) on every C++ file we own; the
# module graph (scripts/check-layers.py over scripts/module-layers.txt); function and file sizes
# (scripts/check-sizes.py over scripts/size-allowlist.txt); clang's -Wthread-safety over the
# sources that hold an absl::Mutex (scripts/check-thread-safety.py; it needs the build's
# compile_commands.json, so scripts/test.sh runs this after the build).
# clang-tidy (.clang-tidy) runs too when EXASERVE_TIDY=1, on the files changed since main's
# merge base, because a whole-tree run takes longer than CI's budget on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.h' 'src/*.cc' 'test/*.h' 'test/*.cc' 'kernels/*.h' \
  'kernels/*.cu' 'kernels/*.cuh' 'kernels/*.cc' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
if [ ${#files[@]} -eq 0 ]; then
  echo "check-style: no files"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}"; then
  echo "check-style: run 'clang-format -i' on the files above" >&2
  exit 1
fi
echo "check-style: clang-format clean on ${#files[@]} files"
python3 scripts/check-layers.py
python3 scripts/check-sizes.py
if [ -f "${BUILD_DIR:-build}/compile_commands.json" ]; then
  python3 scripts/check-thread-safety.py
else
  echo "check-style: no ${BUILD_DIR:-build}/compile_commands.json; thread-safety check skipped" >&2
fi
if [ "${EXASERVE_TIDY:-0}" = "1" ]; then
  mapfile -t changed < <(git diff --name-only "$(git merge-base HEAD origin/main 2>/dev/null || echo HEAD~1)" -- 'src/*.cc' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
  if [ ${#changed[@]} -gt 0 ]; then
    clang-tidy -p "${BUILD_DIR:-build}" --quiet "${changed[@]}"
  fi
fi
