#!/usr/bin/env bash
# `exaserved --model DIR --served-model-name NAME` serves that directory under the name clients
# type in `model`, as vLLM users start it; a bad --model or a name for several models exits 2
# with a message naming the path or flag (README.md "Serving your own model").
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
cp -r "$(dirname "$0")/../../models/exa-tiny-arith" "$work/mine"

expect_usage() {  # expect_usage TEXT ARGS...: exaserved ARGS exits 2 naming TEXT.
  local want=$1; shift
  set +e
  timeout 20 "$BIN/exaserved" --data-dir "$work/bad-data" --http-port 0 --grpc-port 0 \
    --gossip-port 0 "$@" >"$work/out" 2>&1
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "exaserved $* exited $rc, want 2: $(cat "$work/out")"
  grep -qF -- "$want" "$work/out" || fail "exaserved $*: no \"$want\" in: $(cat "$work/out")"
}
expect_usage "\"$work/missing\"" --model "$work/missing"
mkdir "$work/empty"
expect_usage "\"$work/empty\" (inference.models, --model): no config.json" --model "$work/empty"
expect_usage "--served-model-name) names one model; inference.models has 2" \
  --model "$work/mine" --model "$work/mine@v2" --served-model-name my-model
expect_usage "\"a@b\": 1 to 128" --model "$work/mine" --served-model-name a@b

start_daemon --model "$work/mine" --served-model-name my-model
curl -s "$http/v1/models" >"$work/models"
python3 - "$work/models" <<'PY' || fail "/v1/models: $(cat "$work/models")"
import json, sys
ids = [m["id"] for m in json.load(open(sys.argv[1]))["data"]]
assert ids == ["my-model"], ids
PY
ask() {
  curl -s -o "$work/body" -w '%{http_code}' "$http/v1/completions" \
    -d '{"model":"my-model","prompt":"12+30=","max_tokens":4,"temperature":0}'
}
wait_for 30 test "$(ask)" = 200 || fail "completions with model my-model: $(cat "$work/body")"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['model'] == 'my-model', d
assert d['choices'][0]['text'] == '42', d" "$work/body" || fail "answer: $(cat "$work/body")"
kill -TERM $pid
wait $pid || fail "exit code $?"
pid=
echo "own model: ok"
