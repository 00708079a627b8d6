#!/usr/bin/env python3
"""The layers of src/, checked by a machine (issue 40; docs/design.md,
"The layers of src/"). The order is read from the one place that states it:
the ```layers block of docs/design.md, bottom layer first, one rank a line,
sibling layers (same rank, neither below the other) on one line.

Every file of src/ lies in src/<layer>/ for a layer of that block. Every
#include "..." of a file of src/ that names a file of src/ ("<layer>/x.h")
goes to its own layer or to a layer of a lower rank: an include of a higher
layer ("up") or of a sibling layer is a finding, and so is an include of
another layer's private header (a name ending in _int.h: only its own
layer's files include it). An include that names no file of src/ must be a
public header of include/.

Findings listed in tests/docs/layers_allow.txt ("src/<layer>/<file> ->
<layer>/<header>", one a line, '#' comments) are the arrows not fixed yet:
they are printed as allowed, not failed. The list only shrinks: an entry
that matches no finding fails (delete it), and so does a list longer than
ALLOW_MAX (lower ALLOW_MAX with every entry removed; never raise it).

usage: layers_check.py ROOT. Exit 1 listing each finding as
file:line: from-layer -> to-layer (header): why."""
import os
import re
import sys

# The allowlist's length at most; it may only go down.
ALLOW_MAX = 7

root = sys.argv[1]
src = os.path.join(root, "src")
design = os.path.join(root, "docs", "design.md")
allow_path = os.path.join(root, "tests", "docs", "layers_allow.txt")


def layer_order():
    """{layer: rank} from the ```layers block of docs/design.md."""
    text = open(design).read()
    m = re.search(r"^```layers\n(.*?)^```", text, re.S | re.M)
    if not m:
        sys.exit("layers_check: docs/design.md has no ```layers block")
    rank = {}
    for i, line in enumerate(x for x in m.group(1).split("\n") if x.strip()):
        for name in line.split():
            rank[name] = i
    return rank


def allowlist():
    """{(file, header): line number in the allowlist}."""
    res = {}
    if not os.path.exists(allow_path):
        return res
    for n, line in enumerate(open(allow_path), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"^(\S+)\s*->\s*(\S+)$", line)
        if not m:
            sys.exit(f"layers_check: {allow_path}:{n}: not 'file -> header'")
        res[(m.group(1), m.group(2))] = n
    return res


rank = layer_order()
allowed = allowlist()
findings, kept = [], []
n_files = n_includes = 0
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

for d, _, fs in sorted(os.walk(src)):
    for f in sorted(fs):
        path = os.path.join(d, f)
        rel = os.path.relpath(path, root)
        parts = os.path.relpath(path, src).split(os.sep)
        n_files += 1
        if len(parts) != 2 or parts[0] not in rank:
            findings.append(f"{rel}:1: outside any layer (a file of src/ "
                            "lies in src/<layer>/, docs/design.md)")
            continue
        own = parts[0]
        if not f.endswith((".c", ".h")):
            continue
        for n, line in enumerate(open(path, errors="replace"), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            n_includes += 1
            inc = m.group(1)
            if os.path.exists(os.path.join(d, inc)) and "/" not in inc:
                inc = f"{own}/{inc}"  # a bare name of the file's own folder
            target = os.path.join(src, inc)
            if not os.path.exists(target):
                if not os.path.exists(os.path.join(root, "include", inc)):
                    findings.append(f"{rel}:{n}: includes \"{inc}\", which is "
                                    "no file of src/ nor of include/")
                continue
            to = inc.split("/")[0]
            if to not in rank:
                findings.append(f"{rel}:{n}: includes \"{inc}\", outside any "
                                "layer")
                continue
            why = None
            if to != own and rank[to] > rank[own]:
                why = "a higher layer"
            elif to != own and rank[to] == rank[own]:
                why = "a sibling layer"
            elif to != own and os.path.basename(inc).endswith("_int.h"):
                why = "another layer's private header"
            if not why:
                continue
            text = f"{rel}:{n}: {own} -> {to} ({inc}): includes {why}"
            if (rel, inc) in allowed:
                kept.append(text)
                allowed[(rel, inc)] = 0
            else:
                findings.append(text)

for (f, h), n in sorted(allowed.items()):
    if n:
        findings.append(f"tests/docs/layers_allow.txt:{n}: '{f} -> {h}' no "
                        "longer happens: delete the entry (and lower "
                        "ALLOW_MAX in tests/docs/layers_check.py)")
if len(allowed) > ALLOW_MAX:
    findings.append(f"tests/docs/layers_allow.txt: {len(allowed)} entries, "
                    f"more than ALLOW_MAX ({ALLOW_MAX}): the list only "
                    "shrinks -- fix the arrow instead")

for x in kept:
    print(f"allowed (tests/docs/layers_allow.txt): {x}")
for x in findings:
    print(x)
order = " < ".join("{" + " ".join(sorted(k for k in rank if rank[k] == i)) +
                   "}" if sum(1 for k in rank if rank[k] == i) > 1 else
                   next(k for k in rank if rank[k] == i)
                   for i in range(max(rank.values()) + 1))
print(f"layers_check: {order}")
print(f"layers_check: {n_files} files, {n_includes} includes, {len(kept)} "
      f"allowed, {len(findings)} finding(s)")
sys.exit(1 if findings else 0)
