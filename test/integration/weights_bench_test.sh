#!/usr/bin/env bash
# `exaserve-bench weights` end to end on a small model: every phase runs and prints
# JSON; the rack peer keeps the origin to one copy (K = 3 nodes); every node copy re-hashes
# clean; the split-cores phase runs a real exaserved peer and exaserve-cli pulls, pinned; the
# ratios are numbers, not asserted against the 2-core CI machine's timing.
source "$(dirname "$0")/lib.sh"
BIN=$1
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
"$BIN/exaserve-bench" weights --dir "$root" --size 96Mi --files 3 --chunk-bytes 8Mi --nodes 3 \
  --parallel 4 --streams 1 4 --repeats 1 >"$root/out.json" 2>"$root/err" ||
  fail "bench failed: $(tail -5 "$root/err")"
python3 - "$root/out.json" "$(nproc)" <<'PY' || fail "bad bench output: $(head -c 3000 "$root/out.json")"
import json, sys
d = json.load(open(sys.argv[1]))
cores = int(sys.argv[2])
r = d["rack_cold_start"]
assert r["every_copy_verified"] is True, r
assert r["origin_bytes_ratio"] <= 1.05, r           # one copy from the origin for 3 nodes
assert r["peer_bytes"] >= 3 * d["setup"]["model_bytes"], r
p = d["pull_from_peer"]
assert set(p["gbps_by_streams"]) == {"1", "4"} and p["best_gbps"] > 0, p
assert 0 < p["ratio_to_bound"] < 10, p
s = d["pull_split_cores"]
if cores >= 2:
    assert "skipped" not in s, s
    assert set(s["by_streams"]) == {"1", "4"}, s
    assert s["bound_gbps"] > 0 and s["best_median_gbps"] > 0, s
    assert s["bound_gbps"] <= s["sha256_gbps_node_cpu"] + 1e-9, s
    assert len(s["diagnostic_disk_write_runs"]) == 3 and s["diagnostic_disk_write_gbps"] > 0, s
    assert s["diagnostic_ratio_to_bound_with_disk"] >= s["ratio_to_bound"] - 1e-9, s
else:
    assert "skipped" in s, s
l = d["load_vs_raw_read"]
assert l["warm"] > 0 and l["cold"] > 0, l
print("weights bench:", r["origin_bytes_ratio"], p["ratio_to_bound"], s.get("ratio_to_bound"))
PY
test -z "$(ls -A "$root" | grep -v -E '^(out.json|err)$')" || fail "scratch left behind: $(ls "$root")"
# A size outside 1Mi..1Ti is a usage error naming the flag (1Ei once overflowed the free-space
# check); a --dir the bench had to make is removed with the rest of its scratch.
set +e
"$BIN/exaserve-bench" weights --dir "$root/made" --size 1Ei >/dev/null 2>"$root/err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "--size 1Ei: exit $rc: $(cat "$root/err")"
grep -q -- '--size 1Ei: allowed 1Mi to 1Ti' "$root/err" || fail "--size 1Ei: $(cat "$root/err")"
"$BIN/exaserve-bench" weights --dir "$root/made/deeper" --size 1Mi --files 1 --chunk-bytes 1Mi \
  --nodes 1 --parallel 1 --streams 1 --repeats 1 --no-split-cores >/dev/null 2>"$root/err" ||
  fail "small bench: $(tail -5 "$root/err")"
[ ! -e "$root/made" ] || fail "--dir made by the bench left behind: $(find "$root/made")"
echo PASS
