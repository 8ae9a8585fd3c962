#!/usr/bin/env bash
# The Debian package passes lintian, installs on a clean Debian 12 root with apt pulling every
# library it needs, has a unit that passes systemd-analyze verify and, booted with systemd,
# serves the bundled model as the exaserve user under its hardening; it keeps /var/lib/exaserve
# and an edited conffile across an upgrade (restarting the daemon once) and a remove (stopping
# it), and loses them only on purge.
# The root is an mmdebstrap tarball (minbase + systemd, as on a server) cached in
# <build>/deb-test/, unpacked and used in a private mount and PID namespace; without root,
# mmdebstrap, lintian or deb.debian.org it skips (77). docs/testing.md#the-debian-package says
# what it leaves out.
source "$(dirname "$0")/lib.sh"
BIN=$(cd "$1" && pwd)
ROOT=$2
CACHE=$(dirname "$BIN")/deb-test
MIRROR=http://deb.debian.org/debian
UPGRADE_SUFFIX=+upgrade1

skip() { echo "SKIP: $*"; exit 77; }

# ---- outside the namespace: packages and the cached root file system ----

build_packages() {
  local v
  v=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$(dirname "$BIN")/CMakeCache.txt")
  # gzip: the packages are built on every run; xz would add 10 s for nothing this test checks.
  DEB_COMPRESS=gzip "$ROOT/scripts/package-deb.sh" --build-dir "$(dirname "$BIN")" \
    --out-dir "$work/pkgs" --version "$v" >/dev/null || fail "package-deb.sh $v"
  DEB_COMPRESS=gzip "$ROOT/scripts/package-deb.sh" --build-dir "$(dirname "$BIN")" \
    --out-dir "$work/pkgs" --version "$v$UPGRADE_SUFFIX" >/dev/null || fail "package-deb.sh upgrade"
  echo "$v" >"$work/version"
  # A CUDA build depends on NVIDIA's cuBLAS package, which only NVIDIA's repository has: a
  # placeholder of that name stands in for it, and the host's toolkit libraries are mounted.
  local cublas
  cublas=$(dpkg-deb -f "$work/pkgs/exaserve_${v}_"*.deb Depends |
    grep -oE 'libcublas-[0-9]+-[0-9]+' || true)
  if [ -n "$cublas" ]; then
    mkdir -p "$work/placeholder/DEBIAN"
    printf 'Package: %s\nVersion: 0\nArchitecture: %s\nMaintainer: %s\nDescription: %s\n' \
      "$cublas" "$(dpkg --print-architecture)" "test <test@exaserve.invalid>" \
      "test placeholder for NVIDIA cuBLAS" >"$work/placeholder/DEBIAN/control"
    dpkg-deb --build "$work/placeholder" "$work/pkgs/$cublas.deb" >/dev/null
    ldd "$BIN/exaserved" | awk '/libcublas/ {print $3}' | xargs -r -n1 realpath |
      xargs -r -n1 dirname | sort -u >"$work/cuda-lib-dirs"
  fi
}

# Debian 12 minbase with systemd, apt's lists kept so apt can resolve the package's Depends.
cached_rootfs() {
  local tar=$CACHE/bookworm-minbase-systemd.tar
  if [ ! -s "$tar" ]; then
    mkdir -p "$CACHE"
    mmdebstrap --quiet --mode=root --variant=minbase --include=systemd \
      --skip=cleanup/apt/lists bookworm "$CACHE/partial.tar" "$MIRROR" >"$work/mmdebstrap.log" 2>&1 ||
      { cat "$work/mmdebstrap.log"; rm -rf "$CACHE/partial.tar"; fail "mmdebstrap"; }
    mv "$CACHE/partial.tar" "$tar"  # mmdebstrap picks the format by the name's extension
  fi
  echo "$tar"
}

outside() {
  [ "$(id -u)" = 0 ] || skip "needs root (a chroot, mounts, dpkg in it)"
  command -v mmdebstrap >/dev/null || skip "mmdebstrap is not installed (scripts/setup-deps.sh)"
  command -v lintian >/dev/null || skip "lintian is not installed (scripts/setup-deps.sh)"
  curl -s -o /dev/null --max-time 10 "$MIRROR/dists/bookworm/InRelease" ||
    skip "$MIRROR is not reachable"
  # Under the build dir, not /tmp: a run killed at its timeout leaves its unpacked root (about
  # 600 MB) behind, and the next run wipes it. Nothing is mounted there outside the namespace.
  work=$CACHE/work
  rm -rf "$work" && mkdir -p "$work"
  trap 'rm -rf "$work"' EXIT
  build_packages
  # Debian's own checks, warnings included.
  lintian --fail-on error,warning \
    "$work/pkgs/exaserve_$(cat "$work/version")_"*.deb >"$work/lintian.log" 2>&1 ||
    { cat "$work/lintian.log"; fail "lintian"; }
  local tar
  tar=$(cached_rootfs)
  mkdir "$work/root"
  tar -xf "$tar" -C "$work/root"
  mkdir -p "$CACHE/archives/partial"
  # The mounts and every process started in the chroot end with this namespace.
  unshare --mount --propagation private --pid --fork --kill-child --mount-proc -- \
    "$0" "$BIN" "$ROOT" --inside "$work"
}

# ---- inside the namespace ----

# Runs a command in the root: chrooted, or once it is booted, in the container.
in_root() {
  local enter=(chroot "$root")
  [ -z "${init:-}" ] || enter=(nsenter -t "$init" -a)
  "${enter[@]}" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    LC_ALL=C.UTF-8 "$@"
}

prepare_root() {
  mount -t proc proc "$root/proc"
  mount --bind /dev "$root/dev"
  mount --bind "$CACHE/archives" "$root/var/cache/apt/archives"
  mkdir "$root/pkgs" && mount --bind "$work/pkgs" "$root/pkgs"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  local dir
  if [ -s "$work/cuda-lib-dirs" ]; then
    while read -r dir; do
      mkdir -p "$root$dir" && mount --bind -o ro "$dir" "$root$dir"
      echo "$dir" >>"$root/etc/ld.so.conf.d/zz-test-cuda.conf"
    done <"$work/cuda-lib-dirs"
    in_root ldconfig
  fi
  in_root apt-get update -qq >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get update"; }
}

deb() { echo "/pkgs/exaserve_$1_$(dpkg --print-architecture).deb"; }
owner_mode() { in_root stat -c '%U:%G %a' "$1"; }  # names from the chroot's passwd

# apt-get, not dpkg -i: the Depends dpkg-shlibdeps computed must pull every library in.
install_first() {
  local extra=() p
  for p in "$work"/pkgs/libcublas-*.deb; do [ -e "$p" ] && extra+=("/pkgs/$(basename "$p")"); done
  in_root apt-get install -y -qq --no-install-recommends "${extra[@]}" "$(deb "$v")" \
    >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get install"; }
  [ "$(in_root exaserved --version)" = "exaserved $v" ] || fail "exaserved --version"
  in_root exaserve-cli --help >/dev/null || fail "exaserve-cli --help"
  zcat "$root/usr/share/man/man1/exaserved.1.gz" | has 'print.-config' ||
    fail "no manual page for exaserved"
  in_root getent passwd exaserve | has ':/var/lib/exaserve:/usr/sbin/nologin$' ||
    fail "no exaserve system user: $(in_root getent passwd exaserve)"
  [ "$(owner_mode /var/lib/exaserve)" = "exaserve:exaserve 750" ] ||
    fail "/var/lib/exaserve is $(owner_mode /var/lib/exaserve)"
  [ -L "$root/etc/systemd/system/multi-user.target.wants/exaserved.service" ] ||
    fail "exaserved.service was not enabled"
}

check_unit() {
  local unit=/lib/systemd/system/exaserved.service out
  out=$(in_root systemd-analyze verify "$unit" 2>&1) || { echo "$out"; fail "verify"; }
  if grep -q "exaserved" <<<"$out"; then echo "$out"; fail "verify warnings"; fi
  # The hardening stays: systemd's exposure score (0-10, 2.0 today) may not pass 2.5.
  in_root systemd-analyze security --offline=yes --threshold=25 "$unit" >"$work/security" 2>&1 ||
    { cat "$work/security"; fail "the unit's exposure rose above 2.5"; }
}

# Every key exaserved knows (--print-config) is in the conffile, commented out at its default:
# the file as installed and the file with every key uncommented both give the defaults.
check_conffile() {
  local conf=$root/etc/exaserve/exaserved.yaml
  in_root exaserved --print-config >"$work/defaults.yaml"
  python3 - "$work/defaults.yaml" "$conf" "$ROOT/docs/reference/configuration.md" <<'PY' ||
import re, sys
def keys(path, prefix):
    out, section = set(), None
    for line in open(path):
        m = re.match(prefix + r"([a-z_]+):\s*$", line)
        if m: section = m.group(1); out.add(section); continue
        m = re.match(prefix + r"  ([a-z_]+):", line)
        if m: out.add(f"{section}.{m.group(1)}")
    return out
printed, commented = keys(sys.argv[1], ""), keys(sys.argv[2], "#")
documented = set(re.findall(r"`([a-z]+)`", open(sys.argv[3]).read().split("Sections:")[1].split("(see")[0]))
if len(printed) < 100 or printed - commented:
    sys.exit(f"conffile lacks {sorted(printed - commented)} of {len(printed)} keys and sections")
if commented - printed:
    sys.exit(f"conffile has keys exaserved does not know: {sorted(commented - printed)}")
if len(documented) < 10 or documented - commented:
    sys.exit(f"conffile lacks sections configuration.md lists: {sorted(documented - commented)}")
PY
    fail "conffile keys"
  sed -E 's/^#([a-z_]+:)/\1/; s/^#(  [a-z_]+:)/\1/' "$conf" >"$root/tmp/uncommented.yaml"
  grep -q '^  drain_timeout: 30s' "$root/tmp/uncommented.yaml" || fail "uncommenting"
  in_root exaserved --config /etc/exaserve/exaserved.yaml --print-config | cmp -s - "$work/defaults.yaml" ||
    fail "the installed conffile changes a default"
  in_root exaserved --config /tmp/uncommented.yaml --print-config | cmp -s - "$work/defaults.yaml" ||
    fail "a key in the conffile is not at its default"
}

# The installed daemon, started as the unit starts it (its ExecStart, as exaserve; free ports),
# finds the bundled model in /usr/share/exaserve/models and answers with it.
check_serves() {
  local exec_start http body
  # CacheDirectory= would make it at start, as exaserve's, 0750.
  install -d -m 0750 -o "$(stat -c %u "$root/var/lib/exaserve")" \
    -g "$(stat -c %g "$root/var/lib/exaserve")" "$root/var/cache/exaserve"
  exec_start=$(sed -n 's/^ExecStart=//p' "$root/lib/systemd/system/exaserved.service")
  # shellcheck disable=SC2086  # the unit's command line, split as systemd splits it
  chroot --userspec=exaserve:exaserve "$root" /usr/bin/env -i PATH=/usr/bin:/bin $exec_start \
    --http-port 0 --grpc-port 0 --gossip-port 0 >"$work/daemon.log" 2>&1 &
  pid=$!
  wait_for 30 test -s "$root/var/lib/exaserve/endpoints.json" || { cat "$work/daemon.log"; fail "not ready"; }
  http="http://127.0.0.1:$(json_field "$root/var/lib/exaserve/endpoints.json" http_port)"
  completion() {
    body=$(curl -s --max-time 5 "$http/v1/completions" -d '{"prompt":"1+1=","max_tokens":4}')
    grep -q '"text":"2"' <<<"$body"
  }
  wait_for 60 completion || { cat "$work/daemon.log"; fail "no answer from the bundled model: $body"; }
  kill -TERM "$pid"
  wait "$pid" || { cat "$work/daemon.log"; fail "exaserved did not exit 0 on SIGTERM"; }
  [ -s "$root/var/lib/exaserve/node_id" ] || fail "no node id in /var/lib/exaserve"
}

# Boots the root with systemd as PID 1 (systemd-nspawn, its own loopback-only network), so the
# unit runs as installed: hardening, Type=notify, the maintainer scripts' start, restart and stop.
# Fails (returns 1) where nspawn is missing or cannot boot here.
boot_root() {
  command -v systemd-nspawn >/dev/null || { echo "no systemd-nspawn" >"$work/boot.log"; return 1; }
  umount "$root/proc" "$root/dev"
  local binds=(--bind-ro="$work/pkgs:/pkgs") dir
  if [ -s "$work/cuda-lib-dirs" ]; then
    while read -r dir; do binds+=(--bind-ro="$dir"); done <"$work/cuda-lib-dirs"
  fi
  systemd-nspawn --quiet -D "$root" --machine="exaserve-deb-test-$$" --boot --register=no \
    --keep-unit --private-network \
    --console=pipe "${binds[@]}" >"$work/boot.log" 2>&1 &
  nspawn=$!
  # nspawn's child becomes systemd once the container is set up; ask it until it has booted.
  booted() {
    init=$(pgrep -P "$nspawn") &&
      grep -qE '^(running|degraded)$' <<<"$(nsenter -t "$init" -a systemctl is-system-running)"
  }
  wait_for 60 booted && return 0
  init=""
  kill -9 "$nspawn"
  return 1
}

main_pid() { in_root systemctl show -P MainPID exaserved; }

# Enabled by the package, exaserved started at boot: it serves the bundled model, as exaserve,
# with no capabilities, no new privileges and a system-call filter.
check_systemd_serves() {
  local pid_now status
  [ "$(in_root systemctl is-active exaserved)" = active ] ||
    { in_root journalctl -u exaserved --no-pager | tail -20; fail "exaserved is not active after boot"; }
  [ "$(in_root systemctl show -P StatusText exaserved)" = serving ] || fail "not serving"
  [ "$(in_root exaserve-cli generate 1+1=)" = 2 ] || fail "exaserve-cli generate 1+1= on the node"
  pid_now=$(main_pid)
  status=$(in_root cat "/proc/$pid_now/status")
  grep -qE "^Uid:\s+$(in_root id -u exaserve)\s" <<<"$status" || fail "exaserved does not run as exaserve"
  grep -qE '^CapEff:\s+0+$' <<<"$status" && grep -qE '^CapBnd:\s+0+$' <<<"$status" ||
    fail "exaserved holds capabilities: $(grep ^Cap <<<"$status")"
  grep -qE '^NoNewPrivs:\s+1$' <<<"$status" && grep -qE '^Seccomp:\s+2$' <<<"$status" ||
    fail "no NoNewPrivileges or system-call filter"
}

check_upgrade() {
  local node_id state=$root/var/lib/exaserve pid_before
  node_id=$(cat "$state/node_id")
  [ -z "${init:-}" ] || pid_before=$(main_pid)
  echo kept >"$state/marker"
  echo "# edited by deb_package_test" >>"$root/etc/exaserve/exaserved.yaml"
  in_root dpkg -i "$(deb "$v$UPGRADE_SUFFIX")" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "upgrade"; }
  [ "$(in_root dpkg-query -W -f='${Version}' exaserve)" = "$v$UPGRADE_SUFFIX" ] || fail "not upgraded"
  [ "$(cat "$state/marker" 2>/dev/null)" = kept ] || fail "the upgrade lost /var/lib/exaserve/marker"
  [ "$(cat "$state/node_id")" = "$node_id" ] || fail "the upgrade changed the node id"
  [ "$(owner_mode /var/lib/exaserve)" = "exaserve:exaserve 750" ] ||
    fail "after the upgrade /var/lib/exaserve is $(owner_mode /var/lib/exaserve)"
  grep -q '^# edited by deb_package_test' "$root/etc/exaserve/exaserved.yaml" ||
    fail "the upgrade replaced the edited conffile"
  if [ -n "${init:-}" ]; then
    [ "$(in_root systemctl is-active exaserved)" = active ] && [ "$(main_pid)" != "$pid_before" ] ||
      fail "the upgrade did not restart exaserved (pid $pid_before, now $(main_pid))"
  fi
}

check_remove_and_purge() {
  in_root dpkg -r exaserve >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -r"; }
  [ ! -e "$root/usr/bin/exaserved" ] && [ ! -e "$root/lib/systemd/system/exaserved.service" ] ||
    fail "dpkg -r left the binary or the unit"
  if [ -n "${init:-}" ]; then
    [ "$(in_root systemctl show -P ActiveState exaserved)" = inactive ] || fail "dpkg -r did not stop exaserved"
  fi
  [ "$(cat "$root/var/lib/exaserve/marker" 2>/dev/null)" = kept ] || fail "dpkg -r removed /var/lib/exaserve"
  grep -q '^# edited by deb_package_test' "$root/etc/exaserve/exaserved.yaml" || fail "dpkg -r removed the conffile"
  in_root dpkg -P exaserve >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -P"; }
  local p
  for p in /var/lib/exaserve /var/cache/exaserve /etc/exaserve /etc/systemd/system/exaserved.service \
    /etc/systemd/system/multi-user.target.wants/exaserved.service; do
    [ ! -e "$root$p" ] && [ ! -L "$root$p" ] || fail "dpkg -P left $p"
  done
  local status
  status=$(in_root dpkg-query -W -f='${Status}' exaserve 2>/dev/null || true)
  case "$status" in "" | *not-installed) ;; *) fail "after dpkg -P: $status" ;; esac
}

inside() {
  root=$work/root
  v=$(cat "$work/version")
  trap 'kill -9 ${pid:-} 2>/dev/null || true' EXIT
  prepare_root
  install_first
  check_unit
  check_conffile
  local how="in a chroot (the daemon started by hand)"
  if boot_root; then
    how="booted with systemd"
    check_systemd_serves
  else
    echo "systemd-nspawn could not boot the root: $(tail -n 3 "$work/boot.log")"
    mount -t proc proc "$root/proc" 2>/dev/null || true
    mount --bind /dev "$root/dev" 2>/dev/null || true
    check_serves
  fi
  check_upgrade
  check_remove_and_purge
  if [ -n "${init:-}" ]; then
    kill -TERM "$nspawn"  # nspawn halts the container
    timeout 30 tail --pid="$nspawn" -f /dev/null || true
  fi
  echo "deb package: installed, served, upgraded, removed and purged on Debian 12, $how"
}

if [ "${3:-}" = --inside ]; then
  work=$4
  inside
else
  outside
fi
