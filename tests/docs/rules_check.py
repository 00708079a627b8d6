#!/usr/bin/env python3
"""The construction rules of docs/guarantees.md ("Rules"), searched for by a
machine instead of by the next review (issues 38 and 43). Each rule names the
one place that enforces it; this check fails when code elsewhere in src/
bypasses that place. Exit 1 listing every finding as file:line: rule."""
import os
import re
import sys

root = sys.argv[1]
src = os.path.join(root, "src")
findings = []


def each_line(path):
    """The file's lines with comments blanked (line numbers kept)."""
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"),
                  text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    for n, line in enumerate(text.split("\n"), 1):
        yield n, line


files = sorted(f for f in os.listdir(src) if f.endswith((".c", ".h")))

# Rule: no user callback under an internal lock (src/callout.c). Every
# internal mutex goes through dlock__mu_lock / _trylock / _unlock (they
# count the locks a thread holds), and on_lock_lost, the log hook and async
# completions are called only from callout.c / log.c.
for f in files:
    if f == "callout.c":
        continue
    for n, line in each_line(os.path.join(src, f)):
        code = line
        if re.search(r"\bpthread_mutex_(lock|unlock|trylock|timedlock)\s*\(",
                     code):
            findings.append(f"src/{f}:{n}: takes a mutex without "
                            "dlock__mu_lock (callout.c counts the locks a "
                            "thread holds)")
        if re.search(r"on_lock_lost\s*\(", code):
            findings.append(f"src/{f}:{n}: calls on_lock_lost directly "
                            "(use dlock__callout_lost)")
        if f != "log.c" and re.search(r"\blog_fn\s*\(", code):
            findings.append(f"src/{f}:{n}: calls the log hook directly "
                            "(use dlock__log)")
        if re.search(r"->cb\s*\(", code):
            findings.append(f"src/{f}:{n}: calls a completion directly "
                            "(use dlock__callout_done)")

for x in findings:
    print(x)
print(f"rules_check: {len(files)} files, {len(findings)} finding(s)")
sys.exit(1 if findings else 0)
