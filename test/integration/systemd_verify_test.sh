#!/usr/bin/env bash
# The shipped systemd unit passes systemd-analyze verify (against the built binary).
source "$(dirname "$0")/lib.sh"
BIN=$1
UNIT=$2
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze not installed"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The unit runs the packaged binary (/usr/bin, scripts/package-deb.sh); verify it against the built one.
sed "s|/usr/bin/exaserved|$BIN/exaserved|" "$UNIT" > "$work/exaserved.service"
grep -q "^ExecStart=$BIN/exaserved " "$work/exaserved.service" || fail "ExecStart is not /usr/bin/exaserved"
out=$(systemd-analyze verify "$work/exaserved.service" 2>&1) || { echo "$out"; fail "verify"; }
# verify prints warnings without failing; treat any line about our unit as a failure.
if grep -q "exaserved.service" <<<"$out"; then echo "$out"; fail "verify warnings"; fi
echo "systemd unit: ok"
