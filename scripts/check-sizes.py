#!/usr/bin/env python3
"""Functions over 70 lines and files over 800 lines in src/, against scripts/size-allowlist.txt.

STYLE.md: functions stay short (aim under ~70 lines). The allow-list records what was already
over the limits when the check arrived; it may only shrink. The check fails when a function or
file not on the list is over its limit, when one on the list grew past its recorded size, and when
an entry is stale (the function or file shrank, or is gone): `scripts/check-sizes.py --shrink`
then lowers or drops such entries, and never adds or raises one.

A function is measured from the line of its opening brace to the line of its closing brace. The
scanner matches braces after blanking comments, string and character literals and preprocessor
lines; it knows namespaces, classes and function bodies, which is enough for this tree's style.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "scripts" / "size-allowlist.txt"
MAX_FUNCTION_LINES = 70
MAX_FILE_LINES = 800
SUFFIXES = {".h", ".cc", ".cu", ".cuh"}
TOKEN_RE = re.compile(
    r'//[^\n]*|/\*.*?\*/|R"([^(\s]*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
    re.S)
PREPROCESSOR_RE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
SCOPE_RE = re.compile(r"^(?:typedef\s+)?(class|struct|union|enum)\b(?:\s+class)?\s*(?:\[\[[^\]]*\]\]\s*)?"
                      r"([A-Za-z_][\w:]*)?")
NAME_RE = re.compile(r"((?:[A-Za-z_~]\w*\s*::\s*)*(?:operator\s*(?:\(\)|[^\s(]+)|~?[A-Za-z_]\w*))\s*$")
# `) : member_(x), other_` before a `{`: that brace initializes `other_`.
INIT_BRACE_RE = re.compile(r"\)\s*(?:noexcept\s*)?:(?!:)[^;{}]*\b[A-Za-z_]\w*\s*$")
# A lambda's introducer and parameters just before a `{` (but not `operator[](...)`).
LAMBDA_RE = re.compile(r"(?<!operator)\[[^\[\]]*\]\s*(?:\((?:[^()]|\([^()]*\))*\))?\s*(?:mutable\s*)?"
                       r"(?:noexcept\s*)?(?:->\s*[\w:<>,\s*&]+)?\s*$")
CONTROL = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "alignas"}


def blank(match):
  return re.sub(r"[^\n]", " ", match.group(0))


def clean(text):
  """The text with comments, literals and preprocessor lines blanked, newlines kept."""
  text = TOKEN_RE.sub(blank, text)
  return PREPROCESSOR_RE.sub(blank, text)


def top_level(header):
  """`header` with everything inside (), <> of templates and [] removed, and whether it had ()."""
  out, depth, had_paren = [], 0, False
  for c in header:
    if c in "([":
      if depth == 0 and c == "(":
        had_paren = True
      depth += 1
    elif c in ")]":
      depth = max(0, depth - 1)
    elif depth == 0:
      out.append(c)
  return "".join(out), had_paren


def strip_template(header):
  header = header.strip()
  while header.startswith("template"):
    i, depth = header.find("<"), 0
    if i < 0:
      return header
    for j in range(i, len(header)):
      depth += {"<": 1, ">": -1}.get(header[j], 0)
      if depth == 0:
        header = header[j + 1:].strip()
        break
    else:
      return header
  return header


def function_name(header):
  """The name before the parameter list of a function header, or None when it is no function."""
  header = re.sub(r"^\s*(?:public|private|protected)\s*:(?!:)", "", header)
  header = strip_template(header)
  paren = header.find("(")
  m = re.search(r"\boperator\s*\(\)\s*\(", header)
  if m:
    paren = m.end() - 1
  if paren < 0:
    return None
  m = NAME_RE.search(header[:paren])
  if not m:
    return None
  name = re.sub(r"\s+", "", m.group(1))
  if name in CONTROL or name.split("::")[-1] in CONTROL:
    return None
  return name


def skipped_brace(header):
  """Whether a `{` after `header` opens an expression inside a header, not a scope."""
  if header.count("(") > header.count(")") or INIT_BRACE_RE.search(header):
    return True
  m = LAMBDA_RE.search(header)
  return bool(m) and not re.search(r"operator\s*$", header[:m.start()])


def scan(text):
  """(function name, lines) of every function body in `text`, and its line count."""
  text = clean(text)
  functions = []
  # Scope kinds: "ns" (namespace, extern "C", the file), "class", "function" and "opaque" (data,
  # lambdas outside functions); nothing inside a function or opaque scope is scanned.
  stack, header_start, line = [("ns", None)], 0, 1
  line_at = []  # lines of open braces
  i = 0
  n = len(text)
  while i < n:
    c = text[i]
    if c == "\n":
      line += 1
    if c == "{" and stack[-1][0] in ("ns", "class") and skipped_brace(text[header_start:i]):
      # A member's brace initializer or a lambda inside a header (a constructor's initializer
      # list, a default argument): skip past it, the header goes on.
      depth = 0
      while i < n:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        line += text[i] == "\n"
        if depth == 0:
          break
        i += 1
    elif c == "{":
      kind = ("opaque", None)
      if stack[-1][0] in ("ns", "class"):
        header = text[header_start:i]
        flat, had_paren = top_level(strip_template(header.strip()))
        flat = re.sub(r"^\s*(?:public|private|protected)\s*:(?!:)", "", flat).strip()
        scope = SCOPE_RE.match(flat)
        if re.match(r"^(?:inline\s+)?namespace\b", flat) or re.match(r"^extern\s*$", flat):
          kind = ("ns", None)
        elif scope and not had_paren:
          kind = ("class", scope.group(2))
        elif had_paren and "=" not in flat.replace("operator", "") and not re.search(
            r"\[\s*[^\]]*\]\s*$", flat):
          name = function_name(header)
          if name:
            classes = [s[1] for s in stack if s[0] == "class" and s[1]]
            if classes and "::" not in name:
              name = "::".join(classes + [name])
            kind = ("function", name)
      stack.append(kind)
      line_at.append(line)
      header_start = i + 1
    elif c == "}":
      if len(stack) > 1:
        kind = stack.pop()
        start = line_at.pop()
        if kind[0] == "function":
          functions.append((kind[1], line - start + 1))
      header_start = i + 1
    elif c == ";":
      header_start = i + 1
    i += 1
  return functions


def measure():
  """{key: lines} of every function and file over its limit in src/."""
  over = {}
  for path in sorted((ROOT / "src").rglob("*")):
    if path.suffix not in SUFFIXES or not path.is_file():
      continue
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text(errors="replace")
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if lines > MAX_FILE_LINES:
      over[rel] = lines
    for name, length in scan(text):
      if length > MAX_FUNCTION_LINES:
        key = f"{rel}:{name}"
        over[key] = max(over.get(key, 0), length)
  return over


def read_allowlist():
  allowed = {}
  for raw in ALLOWLIST.read_text().splitlines() if ALLOWLIST.exists() else []:
    line = raw.split("#", 1)[0].strip()
    if line:
      key, lines = line.rsplit(None, 1)
      allowed[key] = int(lines)
  return allowed


def write_allowlist(entries):
  header = ("# Functions over 70 lines and files over 800 lines in src/ when scripts/check-sizes.py\n"
            "# arrived: `path:function lines` and `path lines`. Entries may only shrink or go (see\n"
            "# the script); nothing new is added.\n")
  body = "".join(f"{k} {v}\n" for k, v in sorted(entries.items()))
  ALLOWLIST.write_text(header + body)


def main(argv):
  over, allowed = measure(), read_allowlist()
  if "--shrink" in argv:
    kept = {k: min(v, over[k]) for k, v in allowed.items() if k in over}
    write_allowlist(kept)
    allowed = kept
  problems = []
  for key, lines in sorted(over.items()):
    limit = MAX_FILE_LINES if ":" not in key else MAX_FUNCTION_LINES
    what = "file" if ":" not in key else "function"
    if key not in allowed:
      problems.append(f"{key}: {what} of {lines} lines, over the {limit}-line limit; split it "
                      f"(STYLE.md: functions stay short)")
    elif lines > allowed[key]:
      problems.append(f"{key}: {what} grew to {lines} lines; scripts/size-allowlist.txt allows "
                      f"{allowed[key]} and may only shrink")
  for key, lines in sorted(allowed.items()):
    if over.get(key, 0) < lines:
      now = f"now {over[key]} lines" if key in over else "now within the limit or gone"
      problems.append(f"{key}: recorded at {lines} lines, {now}; run scripts/check-sizes.py "
                      f"--shrink to lower the allow-list")
  for problem in problems:
    print(problem, file=sys.stderr)
  if problems:
    print(f"check-sizes: {len(problems)} size problems", file=sys.stderr)
    return 1
  print(f"check-sizes: no function over {MAX_FUNCTION_LINES} lines or file over {MAX_FILE_LINES} "
        f"lines beyond the {len(allowed)} allowed")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
