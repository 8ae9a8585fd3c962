#!/usr/bin/env bash
# Checks the documentation against what cites it. Fails (exit 1), naming file:line, when
#  - a `docs/<file>.md#<anchor>` cited in the sources, scripts, config, README or docs names a
#    file that does not exist or an anchor no heading of that file has (GitHub's anchor rules);
#  - a relative Markdown link in README.md, CHANGELOG.md or docs/ points at nothing;
#  - README.md is longer than 200 lines (it is a newcomer's page: the rest lives in docs/);
#  - the docs or the code refer to files outside the repository, or to issue or session numbers
#    instead of saying what they mean (the pattern is built below, so this file does not match it).
# Usage: scripts/check-docs.sh   (from anywhere; needs python3)
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import os, re, subprocess, sys, unicodedata

ROOT = os.getcwd()
CITE_PATHS = ["src", "test", "kernels", "scripts", "proto", "cmake", "config", "CMakeLists.txt",
              "README.md", "CHANGELOG.md", "docs"]
GREP_PATHS = ["src", "test", "kernels", "scripts", "docs", "README.md", "CHANGELOG.md"]
README_MAX_LINES = 200
# Written in pieces so that this file does not match itself.
FORBIDDEN = re.compile("|".join([r"MISSION" + r"\.md", r"DESIGN" + r"\.md",
                                 r"[Ii]ssue" + r"[- #]?#?[0-9]",
                                 r"[Ss]ession" + r"[- #]?#?[0-9]"]))
SKIP_DIRS = {".git", "build", "node_modules", "corpus", "__pycache__"}
errors = []


def files_under(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
        elif os.path.isdir(p):
            for d, dirs, names in os.walk(p):
                dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
                for n in sorted(names):
                    yield os.path.join(d, n)


def text_lines(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    if b"\0" in data[:8192]:
        return []  # binary
    return data.decode("utf-8", "replace").splitlines()


def github_anchor(heading):
    """GitHub's heading id: lower case, markup and punctuation dropped, spaces to hyphens."""
    h = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: keep their text
    h = h.replace("`", "").strip().lower()
    out = []
    for ch in h:
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LN" or cat == "Mn":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)


_anchor_cache = {}


def anchors_of(md_path):
    if md_path in _anchor_cache:
        return _anchor_cache[md_path]
    seen, anchors, fence = {}, set(), None
    for line in text_lines(md_path):
        m = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if m:
            mark = m.group(1)[0]
            fence = None if fence == mark else (fence or mark)
            continue
        if fence:
            continue
        m = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = github_anchor(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        anchors.add(base if n == 0 else f"{base}-{n}")
    for line in text_lines(md_path):  # explicit <a id="..."> / <a name="..."> anchors
        for m in re.finditer(r"<a\s+(?:id|name)=\"([^\"]+)\"", line):
            anchors.add(m.group(1))
    _anchor_cache[md_path] = anchors
    return anchors


def check_target(src, lineno, target_file, anchor, shown):
    if not os.path.exists(target_file):
        errors.append(f"{src}:{lineno}: {shown}: no such file")
        return
    if anchor and target_file.endswith(".md") and anchor not in anchors_of(target_file):
        errors.append(f"{src}:{lineno}: {shown}: {os.path.relpath(target_file)} has no heading "
                      f"with the anchor #{anchor}")


# 1. docs/<file>.md#<anchor> cited anywhere.
CITE = re.compile(r"(?<![\w/.-])docs/([\w./-]+?\.md)(?:#([\w-]+))?")
for path in files_under(CITE_PATHS):
    if os.path.abspath(path) == os.path.abspath(__file__ if "__file__" in globals() else ""):
        continue
    for i, line in enumerate(text_lines(path), 1):
        for m in CITE.finditer(line):
            check_target(path, i, os.path.join("docs", m.group(1)), m.group(2), m.group(0))

# 2. Relative Markdown links in the docs.
LINK = re.compile(r"\]\(([^)\s]+)\)")
for path in files_under(["README.md", "CHANGELOG.md", "docs"]):
    if not path.endswith(".md"):
        continue
    fence = None
    for i, line in enumerate(text_lines(path), 1):
        m = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if m:
            mark = m.group(1)[0]
            fence = None if fence == mark else (fence or mark)
            continue
        if fence:
            continue
        for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            url = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", url, re.I):
                continue  # http:, https:, mailto:
            file_part, _, anchor = url.partition("#")
            target = path if not file_part else os.path.normpath(
                os.path.join(os.path.dirname(path), file_part))
            check_target(path, i, target, anchor, url)

# 3. README length.
n = len(text_lines("README.md"))
if n > README_MAX_LINES:
    errors.append(f"README.md:{n}: {n} lines, more than {README_MAX_LINES}: move detail into docs/")

# 4. References to files outside the repository, or to issue or session numbers.
for path in files_under(GREP_PATHS):
    for i, line in enumerate(text_lines(path), 1):
        m = FORBIDDEN.search(line)
        if m:
            errors.append(f"{path}:{i}: '{m.group(0)}': say what it means instead "
                          "(requirements live in docs/architecture.md, dates and commits in docs/perf/)")

for e in errors:
    print(e)
if errors:
    print(f"check-docs: {len(errors)} problem(s)", file=sys.stderr)
    sys.exit(1)
print("check-docs: ok")
PY
