#!/usr/bin/env python3
"""Fails when a module uses one it may not (scripts/module-layers.txt).

Checks every `#include "<module>/..."` in src/ and kernels/ and every `exa::<target>` named in a
module's CMakeLists.txt against the table, so the include graph and the CMake target graph both
stay the documented one (docs/architecture.md#dependencies). Prints file:line, the include, and
the rule it breaks.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TABLE = ROOT / "scripts" / "module-layers.txt"
SOURCE_SUFFIXES = {".h", ".cc", ".cu", ".cuh"}
# Include prefixes that are not a directory under src/.
INCLUDE_ALIASES = {"exaserve": "proto", "kernels": "kernels"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([A-Za-z0-9_]+)/')
TARGET_RE = re.compile(r"\bexa::([A-Za-z0-9_]+)")
LIBRARY_RE = re.compile(r"\bexa_cc_library\(\s*NAME\s+([A-Za-z0-9_]+)")


def read_table():
  allowed, problems = {}, []
  for number, raw in enumerate(TABLE.read_text().splitlines(), 1):
    line = raw.split("#", 1)[0].strip()
    if not line:
      continue
    module, sep, deps = line.partition(":")
    module = module.strip()
    if not sep or not module:
      problems.append(f"{TABLE.relative_to(ROOT)}:{number}: expected 'module: deps', got {raw!r}")
      continue
    if module in allowed:
      problems.append(f"{TABLE.relative_to(ROOT)}:{number}: {module} listed twice")
    allowed[module] = set(deps.split())
  for module, deps in allowed.items():
    for dep in sorted(deps - allowed.keys()):
      problems.append(f"{TABLE.relative_to(ROOT)}: {module} may use {dep}, which has no line")
  # Arrows point down only: the table itself must have no cycle.
  state = {}

  def visit(module, path):
    if state.get(module) == "done":
      return
    if state.get(module) == "open":
      problems.append(f"{TABLE.relative_to(ROOT)}: cycle {' -> '.join(path + [module])}")
      return
    state[module] = "open"
    for dep in sorted(allowed.get(module, ())):
      visit(dep, path + [module])
    state[module] = "done"

  for module in sorted(allowed):
    visit(module, [])
  return allowed, problems


def module_of(path):
  """The module a file in src/ or kernels/ belongs to, or None."""
  parts = path.relative_to(ROOT).parts
  if parts[0] == "src" and len(parts) > 2:
    return parts[1]
  if parts[0] in ("kernels", "proto"):
    return parts[0]
  return None


def rule(module, allowed):
  deps = " ".join(sorted(allowed[module])) or "nothing"
  return f"{module} may use: {deps} (scripts/module-layers.txt, docs/architecture.md#dependencies)"


def main():
  allowed, problems = read_table()
  for directory in sorted((ROOT / "src").iterdir()):
    if directory.is_dir() and directory.name not in allowed:
      problems.append(f"src/{directory.name}/: module has no line in scripts/module-layers.txt")
  roots = [ROOT / "src", ROOT / "kernels"]
  # Which module each CMake target belongs to: the module of the CMakeLists.txt defining it.
  target_module = {"proto": "proto"}
  cmake_files = [p for r in roots + [ROOT / "proto"] if r.exists() for p in r.rglob("CMakeLists.txt")]
  for cmake in cmake_files:
    for name in LIBRARY_RE.findall(cmake.read_text()):
      target_module[name] = module_of(cmake)
  for cmake in sorted(cmake_files):
    module = module_of(cmake)
    if module not in allowed:
      continue
    for number, line in enumerate(cmake.read_text().splitlines(), 1):
      for target in TARGET_RE.findall(line.split("#", 1)[0]):
        used = target_module.get(target)
        if used is None:
          problems.append(f"{cmake.relative_to(ROOT)}:{number}: exa::{target} is no exa_cc_library")
        elif used != module and used not in allowed[module]:
          problems.append(f"{cmake.relative_to(ROOT)}:{number}: exa::{target} (module {used}) "
                          f"breaks the layering: {rule(module, allowed)}")
  for root in roots:
    if not root.exists():
      continue
    for path in sorted(root.rglob("*")):
      if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
        continue
      module = module_of(path)
      if module not in allowed:
        continue
      for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        match = INCLUDE_RE.match(line)
        if not match:
          continue
        prefix = match.group(1)
        used = INCLUDE_ALIASES.get(prefix, prefix)
        if used not in allowed or used == module or used in allowed[module]:
          continue
        problems.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}: {module} may not "
                        f"use {used}; {rule(module, allowed)}")
  for problem in problems:
    print(problem, file=sys.stderr)
  if problems:
    print(f"check-layers: {len(problems)} dependencies against the module graph", file=sys.stderr)
    return 1
  print(f"check-layers: includes and CMake deps of {len(allowed)} modules follow the module graph")
  return 0


if __name__ == "__main__":
  sys.exit(main())
