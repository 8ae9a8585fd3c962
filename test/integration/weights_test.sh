#!/usr/bin/env bash
# Weight distribution through real processes: a model published into an origin directory, an
# origin node (--origin-dir) and a rack cache node (--origin), and `exaserve-cli model pull`
# through the rack cache into a node cache, also with the rack cache found through membership
# (--addr) and, with no node to ask, from the origin. Then `model verify` passes, and after one
# byte is flipped in the node's copy it exits 1 naming the chunk; ls, pin, rm and bad flags
# behave.
source "$(dirname "$0")/lib.sh"
BIN=$1
root=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$root"' EXIT
cli() { "$BIN/exaserve-cli" "$@"; }

mkdir -p "$root/src"
head -c 600000 /dev/urandom >"$root/src/model-00001-of-00002.safetensors"
head -c 150000 /dev/urandom >"$root/src/model-00002-of-00002.safetensors"
echo '{"hidden_size": 8}' >"$root/src/config.json"
cli model publish --dir "$root/src" --name tiny --version v1 --origin "$root/origin" \
  --chunk-bytes 64Ki --json >"$root/publish.json" || fail "publish"
grep -q '"chunks":14' "$root/publish.json" || fail "publish: $(cat "$root/publish.json")"

mkdir -p "$root/o" "$root/p"
work=$root/o start_daemon --role storage --origin-dir "$root/origin"
pids+=("$pid"); origin=$grpc
work=$root/p start_daemon --role storage --rack r1 --origin "$origin" --cache-dir "$root/p/cache"
pids+=("$pid"); peer=$grpc

# A third node in the peer's rack pre-stages the model at start: it finds the rack cache through
# membership (--join), pulls through it, and exports the load time.
mkdir -p "$root/n"
work=$root/n EXASERVE_WEIGHTS_PRESTAGE=tiny:v1 EXASERVE_INFERENCE_BACKEND=sim start_daemon \
  --role inference --rack r1 --origin "$origin" --cache-dir "$root/n/cache" \
  --join "127.0.0.1:$(json_field "$root/p/data/endpoints.json" gossip_port)"
pids+=("$pid"); node_http=$http; node_grpc=$grpc
wait_for 30 test -e "$root/n/cache/tiny/v1.state/model-00002-of-00002.safetensors.ok" ||
  fail "pre-staging: $(grep weights "$root/n/log")"
grep -q "\"rack_peer\":\"$peer\"" "$root/n/log" || fail "rack peer not found: $(grep weights "$root/n/log")"
curl -s "$node_http/metrics" >"$root/nm"
grep -q '^exaserve_weights_pull_seconds_count 1' "$root/nm" || fail "load time metric"
cmp "$root/src/config.json" "$root/n/cache/tiny/v1/config.json" || fail "pre-staged bytes differ"

cli model pull --model tiny:v1 --cache-dir "$root/node" --rack-cache "$peer" --origin "$origin" \
  --json >"$root/pull.jsonl" || fail "pull: $(cat "$root/pull.jsonl")"
tail -1 "$root/pull.jsonl" | has '"event":"done"' || fail "pull: $(cat "$root/pull.jsonl")"
tail -1 "$root/pull.jsonl" | has "\"rack-cache $peer\":750019" ||
  fail "pull did not come from the rack cache: $(tail -1 "$root/pull.jsonl")"
cmp "$root/src/model-00001-of-00002.safetensors" \
  "$root/node/tiny/v1/model-00001-of-00002.safetensors" || fail "pulled bytes differ"
# (Into a file first: with pipefail, grep -q closing the pipe early would fail curl.)
curl -s "http://127.0.0.1:$(json_field "$root/p/data/endpoints.json" http_port)/metrics" >"$root/pm"
grep -q "^exaserve_weights_cache_misses_total 14" "$root/pm" || fail "rack cache metrics: $(grep weights_cache "$root/pm")"

# Without --rack-cache the CLI asks the node at --addr for its rack's storage peer (membership):
# node n is in rack r1, whose storage node is the peer. An unreachable --addr: the origin, said.
cli --addr "$node_grpc" model pull --model tiny:v1 --cache-dir "$root/found" --origin "$origin" \
  --json >"$root/found.jsonl" 2>"$root/found.err" || fail "pull via membership: $(cat "$root/found.err")"
tail -1 "$root/found.jsonl" | has "\"rack-cache $peer\":750019" ||
  fail "pull via membership did not use the rack cache: $(cat "$root/found.err" "$root/found.jsonl")"
grep -q "rack cache peer $peer (storage node .* of rack \"r1\", found through $node_grpc)" \
  "$root/found.err" || fail "rack peer message: $(cat "$root/found.err")"
cli --addr 127.0.0.1:1 model pull --model tiny:v1 --cache-dir "$root/fallback" --origin "$origin" \
  --json >"$root/fallback.jsonl" 2>"$root/fallback.err" || fail "fallback: $(cat "$root/fallback.err")"
grep -q 'no rack cache peer: cannot ask the node at --addr 127.0.0.1:1.*fetching from the origin' \
  "$root/fallback.err" || fail "fallback message: $(cat "$root/fallback.err")"
tail -1 "$root/fallback.jsonl" | has "\"origin $origin\":750019" ||
  fail "fallback did not use the origin: $(cat "$root/fallback.jsonl")"

cli model verify --model tiny@v1 --cache-dir "$root/node" >"$root/verify" || fail "verify: $(cat "$root/verify")"
# Flip one byte in chunk 3 of the first shard (offset 200000 / 64 KiB).
python3 - "$root/node/tiny/v1/model-00001-of-00002.safetensors" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(200000); b = f.read(1); f.seek(200000); f.write(bytes([b[0] ^ 1]))
PY
set +e
cli model verify --model tiny --cache-dir "$root/node" >"$root/verify" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || fail "verify of a flipped byte: exit $rc: $(cat "$root/verify")"
grep -q 'BAD  model-00001-of-00002.safetensors chunk 3' "$root/verify" || fail "$(cat "$root/verify")"
# The damaged file is pulled again (its marker is gone); the rest is local.
cli model pull --model tiny:v1 --cache-dir "$root/node" --origin "$origin" --json >"$root/pull2.jsonl" ||
  fail "re-pull: $(cat "$root/pull2.jsonl")"
cli model verify --model tiny:v1 --cache-dir "$root/node" >/dev/null || fail "verify after re-pull"

EXASERVE_RACK_CACHE=$peer cli model sync --source rack-cache --target "$root/synced" --parallel 8 \
  --json >"$root/sync.jsonl" || fail "sync: $(cat "$root/sync.jsonl")"
tail -1 "$root/sync.jsonl" | has '"event":"done","local_bytes":0,"model":"tiny"' ||
  fail "sync: $(cat "$root/sync.jsonl")"
cli model verify --model tiny --cache-dir "$root/synced" >/dev/null || fail "verify after sync"

cli model ls --cache-dir "$root/node" | has 'tiny.*v1.*verified' || fail "ls"
cli model pin --model tiny:v1 --cache-dir "$root/node" || fail "pin"
cli model ls --cache-dir "$root/node" --json | has '"pinned":true' || fail "ls after pin"
cli model rm --model tiny:v1 --cache-dir "$root/node" || fail "rm"
[ ! -e "$root/node/tiny/v1" ] || fail "rm left files"

set +e
cli model pull --model ../etc --cache-dir "$root/node" --origin "$origin" 2>"$root/err"; rc1=$?
cli model pull --model tiny --cache-dir "$root/node" --parallel 0 2>>"$root/err"; rc2=$?
cli model pull --model tiny --cache-dir "$root/node" 2>>"$root/err"; rc3=$?
cli model verify --model tiny --checksum md5 --cache-dir "$root/node" 2>>"$root/err"; rc4=$?
set -e
[ "$rc1$rc2$rc3$rc4" = 2222 ] || fail "bad flags: exits $rc1 $rc2 $rc3 $rc4: $(cat "$root/err")"
grep -q 'must stay inside\|expected letters' "$root/err" || fail "$(cat "$root/err")"
# A peer that accepts and never answers is given up on after --timeout (per manifest or listing
# request), not after a built-in 10 s per tier; node burn-in does not wait its minute on it.
start_silent_peer
pids+=("$pid")
for cmd in "model pull --model tiny:v1 --cache-dir $root/silent --origin $silent" \
           "model sync --source origin --origin $silent --target $root/silent" \
           "--addr $silent node burn-in"; do
  t0=$(date +%s%N)
  set +e
  # shellcheck disable=SC2086  # the command's words
  cli --timeout 1s $cmd >/dev/null 2>"$root/silent.err"
  rc=$?
  set -e
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$rc" = 1 ] || fail "$cmd against a silent peer: exit $rc: $(cat "$root/silent.err")"
  [ "$ms" -lt 6000 ] || fail "$cmd against a silent peer took ${ms} ms with --timeout 1s"
  grep -qi 'deadline' "$root/silent.err" || fail "$cmd: $(cat "$root/silent.err")"
  echo "silent peer: $cmd: exit 1 in ${ms} ms"
done
kill -9 "$pid"
unset 'pids[-1]'
for p in "${pids[@]}"; do kill -TERM "$p"; wait "$p" || fail "a node exited $? after SIGTERM"; done
pids=()
echo "weights: ok"
