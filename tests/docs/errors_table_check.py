#!/usr/bin/env python3
"""errors_table_check.py SRC -- docs/errors.md's table and dlock.h agree.

Every code of DLOCK_ERRNO_MAP in include/dlock.h has one row in the table
of docs/errors.md with the same number, and the table has no other code.
"""
import re
import sys

src = sys.argv[1]
header = open(f"{src}/include/dlock.h", encoding="utf-8").read()
codes = dict(
    (name, int(value))
    for name, value in re.findall(r"X\((\w+), (-?\d+),", header))
if not codes:
    sys.exit("no X(name, value, ...) entries found in include/dlock.h")
table = dict(
    (name, int(value))
    for name, value in re.findall(
        r"^\| `DLOCK_(\w+)` \| (-?\d+) \|",
        open(f"{src}/docs/errors.md", encoding="utf-8").read(), re.M))
bad = []
for name, value in codes.items():
    if name not in table:
        bad.append(f"DLOCK_{name} ({value}) has no row in docs/errors.md")
    elif table[name] != value:
        bad.append(f"DLOCK_{name}: dlock.h says {value}, docs/errors.md "
                   f"{table[name]}")
for name in table.keys() - codes.keys():
    bad.append(f"docs/errors.md lists DLOCK_{name}, which dlock.h does not")
if bad:
    sys.exit("\n".join(bad))
print(f"{len(codes)} error codes: dlock.h and docs/errors.md agree")
