#!/usr/bin/python3
"""Turns ctest's output into the JSON that `scripts/plot-bench.py ci` plots (docs/perf/ci.md).

    scripts/ctest-times.py CTEST.log COMMIT HISTORY.json > OUT.json

CTEST.log: what ctest printed (lines like "  3/81 Test  #3: name ....   Passed   12.34 sec").
HISTORY.json: the recorded runs, [{"date", "commit", "total_s", "tests"}] (the table in
docs/perf/ci.md). Writes {"runs": HISTORY, "latest": {"commit", "tests": [{name, seconds,
status}]}}.
"""
import json
import re
import sys

LINE = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (\S+) \.+\s*(\*{0,3}\w[\w ]*?)\s+([\d.]+) sec")


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    tests = []
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                tests.append({"name": m.group(1), "status": m.group(2).strip("* "),
                              "seconds": float(m.group(3))})
    if not tests:
        sys.exit(f"ctest-times: no test lines in {argv[1]}")
    with open(argv[3], encoding="utf-8") as f:
        runs = json.load(f)
    json.dump({"runs": runs, "latest": {"commit": argv[2], "tests": tests}}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main(sys.argv)
