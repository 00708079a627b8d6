#!/usr/bin/env python3
"""docs/guarantees.md names the test that shows each line: every
`<file>.<case>` it cites must be a TH_CASE of tests/test_<file>.c, a fuzz
target with a corpus (fuzz.<target>), or a case registered by name in
tests/ (soak.checker_catches_faults). Exit 1 listing the names that do not
exist."""
import os
import re
import sys

root = sys.argv[1]
doc = open(os.path.join(root, "docs", "guarantees.md")).read()
tests = os.path.join(root, "tests")
files = {f[5:-2] for f in os.listdir(tests)
         if f.startswith("test_") and f.endswith(".c")}
cases = {}
for short in files:
    text = open(os.path.join(tests, "test_" + short + ".c")).read()
    cases[short] = set(re.findall(r"^TH_CASE(?:_T)?\(\s*([A-Za-z0-9_]+)", text, re.M))
fuzz = set(os.listdir(os.path.join(tests, "fuzz", "corpus")))
cmake_text = open(os.path.join(tests, "CMakeLists.txt")).read()
named = set(re.findall(r"add_test\(NAME ([a-z]+\.[a-z0-9_]+)", cmake_text))

bad, seen = [], 0
for m in re.finditer(r"\b([a-z]+)\.([a-z0-9_]+)\b", doc):
    prefix, case = m.groups()
    if prefix in files:
        seen += 1
        if case not in cases[prefix]:
            bad.append(f"{prefix}.{case}")
    elif prefix == "fuzz":
        seen += 1
        if case not in fuzz:
            bad.append(f"{prefix}.{case}")
    elif prefix == "soak":
        seen += 1
        if f"{prefix}.{case}" not in named:
            bad.append(f"{prefix}.{case}")
for b in bad:
    print(f"docs/guarantees.md names {b}, which is no test")
print(f"{seen} test names checked, {len(bad)} missing")
sys.exit(1 if bad or seen == 0 else 0)
