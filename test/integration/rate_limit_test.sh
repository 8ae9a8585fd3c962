#!/usr/bin/env bash
# Rate limits per API key on two active-active gateways (docs/operations.md#rate-limits): of 200
# fast requests from a key limited to 60 a minute, spread over both gateways, at most 60 + 1 (the
# rounding of two shares) succeed and the rest get 429 with Retry-After and the x-ratelimit-*
# headers (gRPC: RESOURCE_EXHAUSTED); a tokens-per-minute key is charged only the tokens it got;
# a rewritten limits file applies within 2 s without a restart and a bad one keeps the old
# limits; a bad file at start exits 2 naming its line.
source "$(dirname "$0")/lib.sh"
BIN=$1
CLI="$BIN/exaserve-cli"
work=$(mktemp -d)
trap 'kill_nodes; rm -rf "$work"' EXIT

for name in alice bob; do
  "$CLI" apikey new > "$work/$name.key"
  echo "$name: $(awk '/^hash:/ {print $2}' "$work/$name.key")" >> "$work/keys"
done
alice=$(awk '/^key:/ {print $2}' "$work/alice.key")
bob=$(awk '/^key:/ {print $2}' "$work/bob.key")

# A bad file stops the daemon before it starts, naming the file, line and field.
echo "keys: {alice: {requests_per_minute: lots}}" > "$work/bad.yaml"
set +e
EXASERVE_GATEWAY_RATE_LIMITS_FILE="$work/bad.yaml" "$BIN/exaserved" --data-dir "$work/bad" \
  --bind 127.0.0.1 --http-port 0 --grpc-port 0 --gossip-port 0 >"$work/bad.log" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "bad.yaml:1: keys.alice.requests_per_minute: \"lots\": expected a whole number" "$work/bad.log" ||
  fail "a bad limits file: rc=$rc $(cat "$work/bad.log")"

cat > "$work/limits.yaml" <<'YAML'
default: {requests_per_minute: 0}
keys:
  alice: {requests_per_minute: 60}
  bob: {tokens_per_minute: 200}
  carol: {requests_per_minute: 1}   # no such key: a warning
YAML
export EXASERVE_GATEWAY_API_KEYS_FILE="$work/keys" EXASERVE_GATEWAY_RATE_LIMITS_FILE="$work/limits.yaml"
start_node 1 --role gateway,inference
seed="127.0.0.1:$(port_of 1 gossip_port)"
start_node 2 --role gateway --join "$seed"
grep -q '"rate limits for key names gateway.api_keys_file does not have".*carol' "$work/n1.log" ||
  fail "no warning for a limit on an unknown key name"
gw1="http://127.0.0.1:$(port_of 1 http_port)"
gw2="http://127.0.0.1:$(port_of 2 http_port)"
answers() {  # as bob, whose token limit these few tokens do not reach
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $bob" "$1/v1/completions" \
    -d '{"prompt":"1+1=","max_tokens":1}')" = 200 ]
}
sees_two() {
  curl -s -o "$work/metrics" "$1/metrics" && grep -q '^exaserve_gateway_rate_limit_gateways 2$' "$work/metrics"
}
for gw in "$gw1" "$gw2"; do
  wait_for 30 answers "$gw" || { tail -5 "$work/n2.log"; fail "$gw does not answer"; }
  wait_for 10 sees_two "$gw" || fail "$gw does not count two gateways"
done

# send KEY N MAX_TOKENS PARALLEL: N completions alternating between the gateways; prints one JSON
# line per response: status, headers (lower-case), body.
send() {
  python3 - "$1" "$2" "$3" "$4" "$gw1" "$gw2" <<'PY'
import concurrent.futures, json, sys, urllib.error, urllib.request
key, n, max_tokens, parallel, gws = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
def one(i):
    req = urllib.request.Request(gws[i % 2] + "/v1/completions",
        data=json.dumps({"prompt": "1+1=", "max_tokens": max_tokens}).encode(),
        headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, dict((k.lower(), v) for k, v in r.headers.items()), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict((k.lower(), v) for k, v in e.headers.items()), json.loads(e.read())
with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
    for status, headers, body in pool.map(one, range(n)):
        print(json.dumps({"status": status, "headers": headers, "body": body}))
PY
}

# 200 requests a minute's limit of 60: each gateway admits its 30, one more at most overall.
send "$alice" 200 1 8 > "$work/alice.jsonl"
python3 - "$work/alice.jsonl" <<'PY' || fail "requests per minute: $(head -c 600 "$work/alice.jsonl")"
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
ok = [r for r in rs if r["status"] == 200]
limited = [r for r in rs if r["status"] == 429]
print(f"rate limit: {len(ok)} of {len(rs)} admitted (limit 60 over 2 gateways), {len(limited)} got 429")
assert 60 <= len(ok) <= 61, len(ok)
assert len(ok) + len(limited) == len(rs), [r["status"] for r in rs]
for r in limited:
    h, e = r["headers"], r["body"]["error"]
    assert int(h["retry-after"]) >= 1, h
    assert h["x-ratelimit-limit-requests"] == "30" and h["x-ratelimit-remaining-requests"] == "0", h
    assert h["x-ratelimit-reset-requests"].endswith("s"), h
    assert e["type"] == "requests" and e["code"] == "rate_limit_exceeded", e
    assert "requests per minute" in e["message"], e
for r in ok:
    assert "x-ratelimit-remaining-requests" in r["headers"], r["headers"]
    assert "x-ratelimit-limit-tokens" not in r["headers"], r["headers"]  # alice has no token limit
PY
# gRPC: RESOURCE_EXHAUSTED with the limit named.
set +e
"$CLI" --addr "127.0.0.1:$(port_of 2 grpc_port)" --token "$alice" generate "1+1=" 2>"$work/err"; rc=$?
set -e
[ $rc -ne 0 ] && grep -qi "rate limit reached on requests per minute" "$work/err" ||
  fail "gRPC over the limit: rc=$rc $(cat "$work/err")"
# Into a file first: grep -q leaving early would fail curl (SIGPIPE) under pipefail.
curl -s -o "$work/metrics" "$gw1/metrics"
grep -q '^exaserve_gateway_rate_limited_total{key="alice",limit="requests"} [1-9]' "$work/metrics" ||
  fail "no rate_limited metric for alice"

# Tokens: bob's 200 a minute are 100 a gateway. Each request is charged its prompt plus
# max_tokens 40 and refunded the tokens it did not generate (the answer is one token), so
# sequential requests fit many more times than 100 / (prompt + 40).
send "$bob" 40 40 1 > "$work/bob.jsonl"
python3 - "$work/bob.jsonl" <<'PY' || fail "tokens per minute: $(head -c 600 "$work/bob.jsonl")"
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
ok = [r for r in rs if r["status"] == 200]
limited = [r for r in rs if r["status"] == 429]
used = sum(r["body"]["usage"]["total_tokens"] for r in ok)
charge = ok[0]["body"]["usage"]["prompt_tokens"] + 40
print(f"token limit: {len(ok)} admitted using {used} tokens (limit 200 over 2 gateways), "
      f"{len(limited)} got 429; without refunds {2 * (100 // charge)} would have fit")
assert limited and used <= 200, (len(limited), used)
assert len(ok) > 2 * (100 // charge), len(ok)
for r in limited:
    h, e = r["headers"], r["body"]["error"]
    assert e["type"] == "tokens" and "tokens per minute" in e["message"], e
    assert int(h["retry-after"]) >= 1 and h["x-ratelimit-limit-tokens"] == "100", h
PY

# Reload: a bad rewrite is logged and the old limits stay; a good one applies within 2 s.
echo "keys: {alice: {requests_per_minute: -5}}" > "$work/limits.new" && mv "$work/limits.new" "$work/limits.yaml"
wait_for 3 grep -q "rate limits not reloaded" "$work/n1.log" || fail "a bad reload was not logged"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $alice" "$gw1/v1/completions" \
  -d '{"prompt":"1+1=","max_tokens":1}')" = 429 ] || fail "a bad reload lifted the limit"
printf 'keys:\n  alice: {requests_per_minute: 600}\n' > "$work/limits.new" && mv "$work/limits.new" "$work/limits.yaml"
reloaded() {
  curl -s -D "$work/h" -o /dev/null -H "Authorization: Bearer $alice" "$1/v1/completions" \
    -d '{"prompt":"1+1=","max_tokens":1}' && grep -qi '^x-ratelimit-limit-requests: 300' "$work/h"
}
start=$(date +%s%N)
wait_for 3 reloaded "$gw1" && wait_for 1 reloaded "$gw2" || fail "the new limit did not apply"
echo "reload: applied after $(( ($(date +%s%N) - start) / 1000000 )) ms"
[ $(( $(date +%s%N) - start )) -lt 2500000000 ] || fail "the reload took over 2 s"
# A stream carries the headers too (they go out with its status line).
curl -sN -D "$work/h" -o /dev/null -H "Authorization: Bearer $alice" "$gw2/v1/completions" \
  -d '{"prompt":"1+1=","max_tokens":2,"stream":true}'
grep -qi '^x-ratelimit-remaining-requests: [0-9]' "$work/h" || fail "no x-ratelimit headers on a stream: $(cat "$work/h")"
kill -0 "${pids[1]}" && kill -0 "${pids[2]}" || fail "a gateway restarted"
echo "rate_limit: ok"
