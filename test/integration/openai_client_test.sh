#!/usr/bin/env bash
# The official `openai` npm client (installed by scripts/setup-deps.sh into test/tools/openai)
# talks to a single-node ExaServe: completions and chat, streaming and not, errors, models, and
# what vLLM users rely on: logprobs, n, batched prompts, models.retrieve, x-request-id, /tokenize.
source "$(dirname "$0")/lib.sh"
BIN=$1
tools="$(cd "$(dirname "$0")/../tools/openai" && pwd)"
[ -d "$tools/node_modules/openai" ] || fail "openai client not installed: run scripts/setup-deps.sh"
work=$(mktemp -d)
trap 'kill -9 ${pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
start_daemon
node "$tools/client_test.mjs" "$http/v1"
