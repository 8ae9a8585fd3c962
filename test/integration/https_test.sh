#!/usr/bin/env bash
# The OpenAI API over HTTPS (http.tls_cert_file / http.tls_key_file): a lone node with a
# certificate from `exaserve-cli certs init` answers completions and streamed chat on its HTTPS
# port to a client that trusts the CA; the plain HTTP port keeps /healthz and /metrics and
# answers the API paths with 426 naming the HTTPS port; plain HTTP to the HTTPS port, and a
# client that does not trust the certificate, get nothing. A key that is missing or does not
# match the certificate stops the daemon at start with exit 2 naming the file.
source "$(dirname "$0")/lib.sh"
BIN=$1
work=$(mktemp -d)
trap 'kill_nodes; rm -rf "$work"' EXIT
"$BIN/exaserve-cli" certs init --out "$work/certs" --nodes n1,n2 >/dev/null || fail "certs init"
c=$work/certs

start_node 1 --https-port 0 --http-tls-cert "$c/n1.pem" --http-tls-key "$c/n1-key.pem"
https="https://localhost:$(port_of 1 https_port)"
http="http://127.0.0.1:$(port_of 1 http_port)"
[ "$(port_of 1 https_port)" != 0 ] || fail "no https_port in endpoints.json"

ready() { curl -s --cacert "$c/ca.pem" -o /dev/null -w '%{http_code}' "$https/readyz" | has 200; }
wait_for 30 ready || fail "not ready over HTTPS: $(tail -5 "$work/n1.log")"
body=$(curl -s --cacert "$c/ca.pem" "$https/v1/completions" \
  -d '{"model":"exa-tiny-arith","prompt":"12+30=","max_tokens":4,"temperature":0}')
echo "$body" | has '"text":"42"' || fail "completion over HTTPS: $body"
stream=$(curl -s -N --cacert "$c/ca.pem" "$https/v1/chat/completions" \
  -d '{"model":"exa-tiny-arith","messages":[{"role":"user","content":"1+1="}],"max_tokens":3,"stream":true}')
echo "$stream" | has '^data: \[DONE\]' || fail "streamed chat over HTTPS: $stream"
grep -q exa-tiny-arith <<<"$(curl -s --cacert "$c/ca.pem" "$https/v1/models")" || fail "models over HTTPS"

# The plain port: probes and scrapes stay; the API says where it went.
[ "$(curl -s -o /dev/null -w '%{http_code}' "$http/healthz")" = 200 ] || fail "plain /healthz"
# (A here-string, not a pipe: with pipefail, grep -q closing the pipe early fails curl.)
grep -q '^exaserve_ready 1' <<<"$(curl -s "$http/metrics")" || fail "plain /metrics"
code=$(curl -s -o "$work/plain.json" -w '%{http_code}' "$http/v1/completions" -d '{}')
[ "$code" = 426 ] || fail "plain /v1/completions: $code $(cat "$work/plain.json")"
grep -q "HTTPS only, on port $(port_of 1 https_port)" "$work/plain.json" ||
  fail "426 body: $(cat "$work/plain.json")"

# Nothing for plain HTTP on the HTTPS port, nor for a client that does not trust the CA.
if curl -s -m 5 -o /dev/null "http://127.0.0.1:$(port_of 1 https_port)/healthz"; then
  fail "plain HTTP answered on the HTTPS port"
fi
set +e
curl -s -m 5 -o /dev/null "$https/healthz"; rc=$?
set -e
[ $rc -eq 60 ] || fail "an untrusted certificate: curl exit $rc (60 expected)"

# Bad files: exit 2 at start, naming the file.
set +e
"$BIN/exaserved" --data-dir "$work/bad1" --bind 127.0.0.1 --http-port 0 --grpc-port 0 \
  --gossip-port 0 --http-tls-cert "$c/n1.pem" >"$work/bad1.log" 2>&1; rc1=$?
"$BIN/exaserved" --data-dir "$work/bad2" --bind 127.0.0.1 --http-port 0 --grpc-port 0 \
  --gossip-port 0 --http-tls-cert "$c/n1.pem" --http-tls-key "$c/n2-key.pem" >"$work/bad2.log" 2>&1; rc2=$?
set -e
[ $rc1 -eq 2 ] && grep -q "http.tls_key_file" "$work/bad1.log" || fail "cert without key: exit $rc1 $(cat "$work/bad1.log")"
[ $rc2 -eq 2 ] && grep -q "http.tls_key_file.*n2-key.pem.*mismatch\|is not the key of" "$work/bad2.log" ||
  fail "mismatched key: exit $rc2 $(cat "$work/bad2.log")"
echo PASS
