#!/usr/bin/env bash
# Checks the Prometheus and Grafana files shipped in config/:
#   1. promtool check rules   config/prometheus/exaserve-rules.yml
#   2. promtool test rules    test/prometheus/exaserve-rules.test.yml
#   3. promtool check config  config/prometheus/prometheus.yml (copied to a temporary folder with
#      a temporary file_sd targets file, since the observer does not write the real one yet)
#   4. config/grafana/exaserve.json: valid JSON, the panels the dashboard promises, and every PromQL
#      expression parsed by promtool (put into a temporary rules file)
#   5. every exaserve_* / process_* metric named in those files is exported by exaserved (its
#      name appears quoted in src/) or is listed as not yet exported (the rules file's
#      "Metrics not yet exported by exaserved:" comment, the dashboard's description) — and
#      nothing listed there is exported already.
# Prints "ok: ..." and exits 0 when all pass; prints SKIP and exits 0 without promtool.
#
# Usage: test/prometheus/check.sh   (from anywhere)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RULES="$ROOT/config/prometheus/exaserve-rules.yml"
RULES_TEST="$ROOT/test/prometheus/exaserve-rules.test.yml"
PROM_CONFIG="$ROOT/config/prometheus/prometheus.yml"
DASHBOARD="$ROOT/config/grafana/exaserve.json"

if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIP: promtool not installed (apt-get install prometheus); Prometheus rules not checked"
  exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "FAIL: python3 is needed to check the Grafana dashboard" >&2
  exit 1
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Runs promtool; shows its output only when it fails.
run_promtool() {
  local what="$1"
  shift
  if ! promtool "$@" >"$TMP/promtool.out" 2>&1; then
    cat "$TMP/promtool.out" >&2
    fail "$what"
  fi
}

# 1 and 2: the rules and their unit tests.
run_promtool "promtool check rules $RULES" check rules "$RULES"
run_promtool "promtool test rules $RULES_TEST" test rules "$RULES_TEST"

# 3: the example configuration, with its rules beside it and a targets file where it looks.
mkdir -p "$TMP/config"
cp "$RULES" "$TMP/config/exaserve-rules.yml"
cat >"$TMP/targets.json" <<'EOF'
[
  {"targets": ["127.0.0.1:8080"], "labels": {"node": "node-1", "rack": "r1", "roles": "inference"}}
]
EOF
grep -q '/var/lib/exaserve/observer/targets.json' "$PROM_CONFIG" ||
  fail "$PROM_CONFIG does not read /var/lib/exaserve/observer/targets.json"
sed "s|/var/lib/exaserve/observer/targets.json|$TMP/targets.json|" "$PROM_CONFIG" \
  >"$TMP/config/prometheus.yml"
run_promtool "promtool check config $PROM_CONFIG" check config "$TMP/config/prometheus.yml"
if grep -q WARNING "$TMP/promtool.out"; then
  cat "$TMP/promtool.out" >&2
  fail "promtool check config $PROM_CONFIG warned"
fi

# 4 and 5: the dashboard, and the metric names of every file.
python3 - "$ROOT" "$RULES" "$PROM_CONFIG" "$DASHBOARD" "$TMP/dashboard-rules.yml" <<'PY'
import json
import os
import re
import sys

root, rules_path, config_path, dashboard_path, out_path = sys.argv[1:]
errors = []

# --- the dashboard: JSON, panels, PromQL -----------------------------------------------------
try:
    with open(dashboard_path, encoding="utf-8") as f:
        dashboard_text = f.read()
    dashboard = json.loads(dashboard_text)
except (OSError, ValueError) as e:
    sys.exit(f"FAIL: {dashboard_path}: not valid JSON: {e}")

def walk(panels):
    for p in panels:
        yield p
        yield from walk(p.get("panels", []))

panels = list(walk(dashboard.get("panels", [])))
titles = [p.get("title", "") for p in panels]
# replica health, TTFT/ITL/e2e P50/P99, tokens/s, queue and pending tokens, KV usage,
# GPU memory, network, weight-load times, gossip health, alerts.
required = ["Firing alerts", "Replicas by state", "Ready / desired replicas",
            "Time to first token P50 / P99", "Inter-token latency P50 / P99",
            "End-to-end latency P50 / P99", "Tokens/s", "Queue and pending tokens",
            "KV cache usage", "GPU memory used", "Network utilisation",
            "Weight pull time P50 / P99", "Weight load to device", "Members by state (gossip)",
            "Gossip health"]
for t in required:
    if t not in titles:
        errors.append(f"{dashboard_path}: no panel titled {t!r}")
if dashboard.get("schemaVersion", 0) < 36:
    errors.append(f"{dashboard_path}: schemaVersion {dashboard.get('schemaVersion')} is too old")
if not any(i.get("name") == "DS_PROMETHEUS" for i in dashboard.get("__inputs", [])):
    errors.append(f"{dashboard_path}: no DS_PROMETHEUS datasource input")
ids = [p.get("id") for p in panels]
if len(ids) != len(set(ids)):
    errors.append(f"{dashboard_path}: panel ids are not unique")

# Grafana's variables, replaced by what Grafana would put there, so that promtool can parse.
grafana_vars = {"$__rate_interval": "1m", "$__interval": "30s", "$__range": "6h"}
records = []
for p in panels:
    if p.get("type") == "row":
        continue
    if p.get("datasource", {}).get("uid") != "${DS_PROMETHEUS}":
        errors.append(f"{dashboard_path}: panel {p.get('title')!r} does not use ${{DS_PROMETHEUS}}")
    if not p.get("targets"):
        errors.append(f"{dashboard_path}: panel {p.get('title')!r} has no query")
    for t in p.get("targets", []):
        expr = t.get("expr", "")
        for var, value in grafana_vars.items():
            expr = expr.replace(var, value)
        if "$" in expr:
            errors.append(f"{dashboard_path}: panel {p.get('title')!r}: unknown variable in {expr!r}")
            continue
        records.append((f"grafana:panel_{p.get('id')}:{t.get('refId')}", p.get("title"), expr))
with open(out_path, "w", encoding="utf-8") as f:
    f.write("groups:\n  - name: grafana-exaserve-dashboard\n    rules:\n")
    for name, title, expr in records:
        f.write(f"      # {title}\n      - record: {name}\n        expr: {json.dumps(expr)}\n")

# --- metric names: exported, or listed as not yet exported ------------------------------------
exported = set()
for d, _, files in os.walk(os.path.join(root, "src")):
    for name in files:
        if name.endswith((".cc", ".h")):
            with open(os.path.join(d, name), encoding="utf-8", errors="replace") as f:
                exported.update(re.findall(r'"((?:exaserve|process)_[a-z0-9_]+)"', f.read()))

with open(rules_path, encoding="utf-8") as f:
    rules_text = f.read()
m = re.search(r"^# Metrics not yet exported by exaserved:\n((?:#.*\n)*)", rules_text, re.M)
if not m:
    errors.append(f"{rules_path}: no 'Metrics not yet exported by exaserved:' comment")
    rules_missing = set()
else:
    rules_missing = set(re.findall(r"^#   (exaserve_[a-z0-9_]+)", m.group(1), re.M))
m = re.search(r"Metrics not yet exported by exaserved: ([^;]*);", dashboard.get("description", ""))
dashboard_missing = set(m.group(1).split(", ")) if m else set()

def used_names(text):
    names = set()
    for n in re.findall(r"\b((?:exaserve|process)_[a-z0-9_]+)", text):
        base = re.sub(r"_(bucket|count|sum)$", "", n)
        names.add(base if base in exported or base in rules_missing | dashboard_missing else n)
    return names

# Comments may name anything; rules (expressions and annotations) and panels may not.
rules_body = "\n".join(l for l in rules_text.splitlines() if not l.lstrip().startswith("#"))
for path, text, missing in ((rules_path, rules_body, rules_missing),
                            (dashboard_path, dashboard_text, dashboard_missing)):
    for n in sorted(used_names(text)):
        if n not in exported and n not in missing:
            errors.append(f"{path}: {n} is not exported by exaserved (no \"{n}\" in src/) "
                          f"and not listed as not yet exported")
    for n in sorted(missing):
        if n in exported:
            errors.append(f"{path}: {n} is listed as not yet exported, but src/ exports it: "
                          f"take it off the list")
        if n not in used_names(text):
            errors.append(f"{path}: {n} is listed as not yet exported but not used")

if errors:
    for e in errors:
        print(f"FAIL: {e}", file=sys.stderr)
    sys.exit(1)
print(f"{len(panels)} panels, {len(records)} queries; "
      f"{len(rules_missing | dashboard_missing)} metrics not yet exported")
PY
run_promtool "PromQL of $DASHBOARD (as $TMP/dashboard-rules.yml)" \
  check rules "$TMP/dashboard-rules.yml"
queries="$(grep -c '^      - record:' "$TMP/dashboard-rules.yml")"

echo "ok: promtool check rules, test rules, check config; Grafana dashboard JSON, panels and" \
  "$queries PromQL queries; metric names match what exaserved exports"
