#!/usr/bin/env bash
# Installs every Debian package ExaServe builds, tests and runs with (DESIGN.md §5).
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
  # tests and checks
  catch2 curl prometheus clang-format systemd
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# prometheus would start a server on install: keep package scripts from starting services.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup-deps: done"
