#!/usr/bin/env bash
# package-deb.sh [--build-dir DIR] [--out-dir DIR] [--version VERSION] [--cublas-depends DEP]:
# builds exaserve_<VERSION>_<arch>.deb from a build tree (docs/operations.md#the-debian-package).
#   --build-dir       the tree scripts/build.sh made, with bin/exaserved, bin/exaserve-cli,
#                     bin/exaserve-sim and bin/exaserve-bench in it (default: build)
#   --out-dir         where the .deb goes (default: the build dir)
#   --version         the package version (default: the project's, from CMakeCache.txt)
#   --cublas-depends  the package that provides cuBLAS to a CUDA build (default: NVIDIA's
#                     libcublas-MAJOR-MINOR for the toolkit the build used)
# DEB_COMPRESS=gzip|xz|zstd|none picks the compression (default xz, as Debian's archive).
# Prints the path of the .deb. Exit 2: bad arguments or a build tree that lacks a binary.
#
# Plain dpkg-deb over a staged tree: the package is exactly the files below plus
# packaging/deb/, readable in one place, and the CMake graph needs no install() rules.
# Dependencies come from dpkg-shlibdeps, as in any Debian package.
set -euo pipefail
cd "$(dirname "$0")/.."
BINARIES=(exaserved exaserve-cli exaserve-sim exaserve-bench)

usage() {
  echo "package-deb.sh: $*" >&2
  echo "usage: scripts/package-deb.sh [--build-dir DIR] [--out-dir DIR] [--version VERSION]" \
    "[--cublas-depends DEP]" >&2
  exit 2
}

parse_args() {
  BUILD_DIR=build OUT_DIR="" VERSION="" CUBLAS_DEPENDS=""
  while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage "$1 needs a value"
    case "$1" in
      --build-dir) BUILD_DIR=$2 ;;
      --out-dir) OUT_DIR=$2 ;;
      --version) VERSION=$2 ;;
      --cublas-depends) CUBLAS_DEPENDS=$2 ;;
      *) usage "unknown argument \"$1\"" ;;
    esac
    shift 2
  done
  BUILD_DIR=$(cd "$BUILD_DIR" 2>/dev/null && pwd) || usage "--build-dir: no such directory"
  OUT_DIR=${OUT_DIR:-$BUILD_DIR}
  local b
  for b in "${BINARIES[@]}"; do
    [ -x "$BUILD_DIR/bin/$b" ] || usage "$BUILD_DIR/bin/$b is missing; build it first:" \
      "TARGETS=\"${BINARIES[*]}\" scripts/build.sh"
  done
  if [ -z "$VERSION" ]; then
    VERSION=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD_DIR/CMakeCache.txt")
  fi
  # Debian policy 5.6.12: an upstream version starts with a digit.
  [[ "$VERSION" =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] ||
    usage "--version \"$VERSION\": expected a Debian version like 0.1.0 or 0.1.0+git1"
  command -v help2man >/dev/null ||
    { echo "package-deb.sh: help2man is not installed (scripts/setup-deps.sh)" >&2; exit 1; }
  case "${DEB_COMPRESS:=xz}" in
    gzip | xz | zstd | none) ;;
    *) usage "DEB_COMPRESS=\"$DEB_COMPRESS\": expected gzip, xz, zstd or none" ;;
  esac
}

# The files the package installs, under $STAGE.
stage_files() {
  local b
  install -d -m 0755 "$STAGE/usr/bin" "$STAGE/lib/systemd/system" "$STAGE/etc/exaserve" \
    "$STAGE/usr/share/exaserve/models" "$STAGE/usr/share/doc/exaserve/docs/reference" \
    "$STAGE/usr/share/lintian/overrides"
  for b in "${BINARIES[@]}"; do
    # Debug sections go (64 MB → 18 MB for exaserved); the symbol table stays for backtraces.
    strip --strip-debug -o "$STAGE/usr/bin/$b" "$BUILD_DIR/bin/$b"
    chmod 0755 "$STAGE/usr/bin/$b"
  done
  write_manpages
  install -m 0644 config/systemd/exaserved.service "$STAGE/lib/systemd/system/"
  write_conffile >"$STAGE/etc/exaserve/exaserved.yaml"
  chmod 0644 "$STAGE/etc/exaserve/exaserved.yaml"
  # /usr/bin/exaserved finds it as ../share/exaserve/models (src/node/bundled_model.cc).
  cp -r models/exa-tiny-arith "$STAGE/usr/share/exaserve/models/"
  chmod -R u=rwX,go=rX "$STAGE/usr/share/exaserve"
  install -m 0644 README.md "$STAGE/usr/share/doc/exaserve/"
  install -m 0644 docs/*.md "$STAGE/usr/share/doc/exaserve/docs/"
  install -m 0644 docs/reference/*.md "$STAGE/usr/share/doc/exaserve/docs/reference/"
  gzip -9n <CHANGELOG.md >"$STAGE/usr/share/doc/exaserve/CHANGELOG.md.gz"
  write_debian_changelog | gzip -9n >"$STAGE/usr/share/doc/exaserve/changelog.gz"
  write_lintian_overrides >"$STAGE/usr/share/lintian/overrides/exaserve"
  chmod 0644 "$STAGE"/usr/share/doc/exaserve/*.gz "$STAGE/usr/share/lintian/overrides/exaserve"
  cat >"$STAGE/usr/share/doc/exaserve/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ExaServe

Files: *
Copyright: 2026 The ExaServe authors
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF
  chmod 0644 "$STAGE/usr/share/doc/exaserve/copyright"
}

# Manual pages from each binary's --help (help2man), dated by the commit built.
write_manpages() {
  local b name epoch
  epoch=$(git log -1 --format=%at 2>/dev/null || date +%s)
  install -d -m 0755 "$STAGE/usr/share/man/man1"
  for b in "${BINARIES[@]}"; do
    # The first line of --help is "NAME: what it is. More...": the man page's NAME line.
    name=$("$BUILD_DIR/bin/$b" --help | head -n 1 | sed -e "s/^$b: //" -e 's/\. .*//')
    PATH="$BUILD_DIR/bin:$PATH" SOURCE_DATE_EPOCH=$epoch help2man --no-info --no-discard-stderr \
      --version-string="$VERSION" --name="$name" "$b" | gzip -9n >"$STAGE/usr/share/man/man1/$b.1.gz"
    chmod 0644 "$STAGE/usr/share/man/man1/$b.1.gz"
  done
}

# A native package's changelog.gz is in Debian's format; the project's own is CHANGELOG.md.gz.
# Dated by the commit built, so two builds of one tree give the same file.
write_debian_changelog() {
  local date
  date=$(git log -1 --format=%aD 2>/dev/null || date -R)
  printf 'exaserve (%s) unstable; urgency=medium\n\n' "$VERSION"
  printf '  * Built by scripts/package-deb.sh from %s. What changed is in\n' \
    "$(git describe --always --dirty 2>/dev/null || echo "an unversioned tree")"
  printf '    /usr/share/doc/exaserve/CHANGELOG.md.gz.\n\n'
  printf ' -- ExaServe maintainers <maintainers@exaserve.invalid>  %s\n' "$date"
}

# What lintian reports and the package does on purpose.
write_lintian_overrides() {
  echo "# Debug sections are stripped; symbols stay so that crash reports name functions."
  echo "exaserve: unstripped-binary-or-object [usr/bin/*]"
  if [ -n "$CUBLAS_DEPENDS" ]; then
    echo "# A CUDA build finds cuBLAS where the CUDA toolkit installs it."
    objdump -p "$STAGE/usr/bin/exaserved" |
      awk '/RUNPATH/ {print "exaserve: custom-library-search-path RUNPATH " $2 " [usr/bin/*]"}'
  fi
}

# /etc/exaserve/exaserved.yaml: config/exaserved.yaml (every key at its default,
# docs/reference/configuration.md) with each key line commented out, so the file documents every
# key and sets none; an upgrade can then change a default without a conffile prompt.
write_conffile() {
  cat <<'EOF'
# /etc/exaserve/exaserved.yaml, installed by the exaserve package. Every key is here, commented
# out, at its default: uncomment a key (remove the first "#" of its line, and of its section's)
# to change it, then `systemctl restart exaserved`. dpkg keeps your changes on upgrade.
# The unit passes --data-dir /var/lib/exaserve and --cache-dir /var/cache/exaserve, which take
# precedence over node.data_dir and node.cache_dir here.

EOF
  sed -E 's/^([[:space:]]*[^#[:space:]])/#\1/' config/exaserved.yaml
}

# cuBLAS is not in Debian: a CUDA build's binaries need NVIDIA's libcublas-MAJOR-MINOR, from the
# CUDA repository, for the toolkit the build used. Sets CUBLAS_DEPENDS (empty: a CPU-only build).
find_cublas_depends() {
  local needed
  needed=$(objdump -p "$BUILD_DIR"/bin/* | awk '/NEEDED/ {print $2}')
  if ! grep -q '^libcublas' <<<"$needed"; then
    CUBLAS_DEPENDS=""
  elif [ -z "$CUBLAS_DEPENDS" ]; then
    CUBLAS_DEPENDS=$(cat "$BUILD_DIR"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null |
      sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\([0-9]*\)\.\([0-9]*\).*/libcublas-\1-\2/p' |
      head -n 1)
    [ -n "$CUBLAS_DEPENDS" ] || usage "the binaries need cuBLAS and the build names no CUDA" \
      "toolkit version: give --cublas-depends"
  fi
}

# The Depends of the binaries' shared libraries, as "pkg (>= v), ...", from dpkg-shlibdeps, run
# where it expects to be: beside debian/control, on the files staged in debian/exaserve.
shlib_depends() {
  local lib
  if [ -n "$CUBLAS_DEPENDS" ]; then
    # shlibs.local (deb-shlibs(5)): "NAME SOVERSION DEPENDS" for libraries no package describes.
    objdump -p "$STAGE"/usr/bin/* | awk '/NEEDED *libcublas/ {print $2}' | sort -u |
      while read -r lib; do
        echo "${lib%%.so.*} ${lib##*.so.} $CUBLAS_DEPENDS"
      done >"$WORK/debian/shlibs.local"
  fi
  (cd "$WORK" && dpkg-shlibdeps -O --warnings=0 debian/exaserve/usr/bin/*) |
    sed -n 's/^shlibs:Depends=//p'
}

write_control() {
  local depends size
  install -d -m 0755 "$STAGE/DEBIAN"  # how dpkg-shlibdeps tells the package's root
  depends=$(shlib_depends)
  [ -n "$depends" ] || { echo "package-deb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
  size=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
  sed -e "s|@VERSION@|$VERSION|" -e "s|@ARCH@|$ARCH|" -e "s|@INSTALLED_SIZE@|$size|" \
    -e "s|@SHLIBS@|$depends|" packaging/deb/control.in >"$STAGE/DEBIAN/control"
  echo /etc/exaserve/exaserved.yaml >"$STAGE/DEBIAN/conffiles"
  install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$STAGE/DEBIAN/"
  (cd "$STAGE" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z |
    xargs -0 md5sum >DEBIAN/md5sums)
  chmod 0644 "$STAGE/DEBIAN/control" "$STAGE/DEBIAN/conffiles" "$STAGE/DEBIAN/md5sums"
}

main() {
  parse_args "$@"
  find_cublas_depends
  umask 022
  ARCH=$(dpkg --print-architecture)
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  STAGE=$WORK/debian/exaserve
  install -d -m 0755 "$STAGE"
  # dpkg-shlibdeps reads the source package's control file for the binary packages' names.
  printf 'Source: exaserve\n\nPackage: exaserve\nArchitecture: any\n' >"$WORK/debian/control"
  stage_files
  write_control
  mkdir -p "$OUT_DIR"
  local deb="$OUT_DIR/exaserve_${VERSION}_${ARCH}.deb"
  dpkg-deb --root-owner-group -Z"$DEB_COMPRESS" --build "$STAGE" "$deb" >/dev/null
  echo "$deb"
}

main "$@"
