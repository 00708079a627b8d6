#!/usr/bin/env python3
"""The layout rules of the developers' brief, checked by a machine: every
function in src/ is at most 100 lines long and every function in tools/ at
most 120 (from the line of its name to its closing brace), and every C file
of src/ opens with a comment that says what it owns. Exit 1 listing each
finding as file:line: rule."""
import os
import re
import sys

root = sys.argv[1]
LIMITS = {"src": 100, "tools": 120}
findings = []


def blank(text):
    """Comments, strings and character literals blanked, lines kept."""
    def keep_lines(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    pat = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'
                     r"'(?:\\.|[^'\\\n])*'", re.S)
    text = pat.sub(keep_lines, text)
    # preprocessor lines (macros may hold unbalanced braces)
    out = []
    cont = False
    for line in text.split("\n"):
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def functions(path):
    """(name, first line, last line) of every function definition."""
    text = blank(open(path, errors="replace").read())
    depth = 0
    start = None
    i = 0
    res = []
    while i < len(text):
        ch = text[i]
        if ch == "{":
            if depth == 0:
                head = text[max(0, i - 600):i]
                m = re.search(r"([A-Za-z_]\w*)\s*\(([^;{}()]|\([^;{}]*?\))*\)"
                              r"\s*(__attribute__\s*\(\(.*?\)\)\s*)?$", head,
                              re.S)
                if m and m.group(1) not in ("if", "for", "while", "switch",
                                            "sizeof", "return"):
                    name_at = i - len(head) + m.start(1)
                    start = (m.group(1), text.count("\n", 0, name_at) + 1)
                else:
                    start = None
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and start:
                res.append((start[0], start[1], text.count("\n", 0, i) + 1))
                start = None
        i += 1
    return res


n_funcs = 0
for top, limit in LIMITS.items():
    for d, _, fs in os.walk(os.path.join(root, top)):
        for f in sorted(fs):
            if not f.endswith(".c"):
                continue
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)
            for name, a, b in functions(p):
                n_funcs += 1
                if b - a + 1 > limit:
                    findings.append(f"{rel}:{a}: {name} is {b - a + 1} lines "
                                    f"(at most {limit} in {top}/)")
            if top == "src":
                head = open(p, errors="replace").read().lstrip()
                if not head.startswith("/*"):
                    findings.append(f"{rel}:1: does not open with a comment "
                                    "saying what it owns")

for x in findings:
    print(x)
print(f"layout_check: {n_funcs} functions, {len(findings)} finding(s)")
sys.exit(1 if findings else 0)
