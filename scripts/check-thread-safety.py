#!/usr/bin/env python3
"""Clang's -Wthread-safety over every source in src/ that holds a mutex.

Fields a mutex guards carry ABSL_GUARDED_BY and functions that need it held
ABSL_EXCLUSIVE_LOCKS_REQUIRED (abseil's thread annotations on absl::Mutex); clang then proves
every access holds the lock. GCC ignores the annotations, so this runs clang++ -fsyntax-only with
each file's flags from the build's compile_commands.json (BUILD_DIR, default build/). Files are
those that mention absl::Mutex, so the check stays well under a minute on 2 cores; files listed in
EXCLUDED are skipped, each with its reason.
"""
import concurrent.futures
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Sources whose locking is not annotated yet, and why.
EXCLUDED = {
    # Being rewritten elsewhere; its std::mutex fields still carry `// mu_` comments.
    "src/scheduler/scheduler_service.cc",
}
FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option"]


def command_for(entry):
  args = entry.get("arguments") or shlex.split(entry["command"])
  out, skip = ["clang++"], False
  for arg in args[1:]:
    if skip:
      skip = False
      continue
    if arg in ("-o", "-c"):
      skip = arg == "-o"
      continue
    if arg.startswith("-W") or arg.startswith("-g") or arg.startswith("-O"):
      continue  # GCC's warning set is the build's business; only thread safety here
    out.append(arg)
  return out + FLAGS


def main():
  if not shutil.which("clang++"):
    print("check-thread-safety: clang++ not found; scripts/setup-deps.sh installs clang",
          file=sys.stderr)
    return 1
  build = ROOT / os.environ.get("BUILD_DIR", "build")
  database = build / "compile_commands.json"
  if not database.exists():
    print(f"check-thread-safety: no {database}; configure first (scripts/build.sh)",
          file=sys.stderr)
    return 1
  jobs = []
  for entry in json.loads(database.read_text()):
    path = pathlib.Path(entry["file"])
    try:
      rel = path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
      continue
    if not rel.startswith("src/") or rel in EXCLUDED or path.suffix != ".cc":
      continue
    text = path.read_text(errors="replace")
    header = path.with_suffix(".h")
    if header.exists():
      text += header.read_text(errors="replace")
    if "absl::Mutex" in text:
      jobs.append((rel, entry["directory"], command_for(entry)))

  def run(job):
    rel, directory, command = job
    done = subprocess.run(command + [str(ROOT / rel)], cwd=directory, capture_output=True,
                          text=True)
    return rel, done.returncode, done.stderr

  failed = 0
  workers = int(os.environ.get("JOBS", "2"))
  with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
    for rel, code, stderr in pool.map(run, sorted(jobs)):
      if code != 0:
        failed += 1
        sys.stderr.write(stderr)
  if failed:
    print(f"check-thread-safety: {failed} of {len(jobs)} files fail clang -Wthread-safety",
          file=sys.stderr)
    return 1
  print(f"check-thread-safety: clang -Wthread-safety clean on {len(jobs)} files")
  return 0


if __name__ == "__main__":
  sys.exit(main())
