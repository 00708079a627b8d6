#!/usr/bin/env python3
"""Turn a `dlock-bench --json` run into the README's performance rows.

usage: dlock-bench --json | tools/bench/readme_rows.py
       tools/bench/readme_rows.py saved-output.txt

Reads the last line starting with '{' and prints one markdown table:
target | requirement | measured | ratio | result.
"""
import json
import sys


def num(v):
    if v is None:
        return "-"
    if isinstance(v, float) and v != v:
        return "-"
    if abs(v) >= 100 or v == int(v):
        return "%.0f" % v
    return "%.2f" % v


def main():
    text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    js = [l for l in text.splitlines() if l.startswith("{")]
    if not js:
        sys.exit("readme_rows.py: no JSON line (run dlock-bench with --json)")
    doc = json.loads(js[-1])
    print("| target | requirement | measured | ratio | result |")
    print("| --- | --- | ---: | ---: | --- |")
    for t in doc["targets"]:
        ratio = t.get("ratio")
        print("| %s | %s | %s %s | %s | %s |" % (
            t["id"], t["requirement"], num(t["measured"]), t["unit"],
            "-" if ratio is None else "%.2f" % ratio, t["result"]))


if __name__ == "__main__":
    main()
