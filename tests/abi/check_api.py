#!/usr/bin/env python3
"""check_api.py LIBDLOCK_SO SOURCE_DIR -- the API/ABI bookkeeping of
docs/abi.md, checked against the built shared library:

1. its SONAME is libdlock.so.<DLOCK_SOVERSION of include/dlock/version.h>;
2. it exports every call that dlock.h and every saved release header
   (tests/abi/<version>/dlock.h) declare -- a removed or renamed call is a
   break -- and nothing else named dlock_* (internals stay hidden);
3. every public call in include/ carries DLOCK_SINCE(major, minor): not later
   than the current version, the saved release's version or earlier for a
   call that release already had, and later than every saved release for a
   call none of them had.
Exit 0 with a summary, or 1 listing every problem.
"""
import glob
import os
import re
import subprocess
import sys

DECL = re.compile(r"\b(?:DLOCK_API|static\s+inline)\b[^;{}()]*?\b(dlock_\w+)\s*\(")
SINCE = re.compile(r"DLOCK_SINCE\((\d+),\s*(\d+)\)")


def declared(path):
    """Names of the functions a header declares (DLOCK_API or inline)."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"),
                  text, flags=re.S)
    api, inline = set(), set()
    for m in DECL.finditer(text):
        (inline if "inline" in m.group(0) else api).add(m.group(1))
    return api, inline


def tags(path):
    """{name: (major, minor)} from the DLOCK_SINCE before each declaration;
    names declared without one map to None."""
    out = {}
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        m = re.search(r"^(?:DLOCK_SINCE\(.*?\)\s*)?(?:DLOCK_API|static\s+inline)\b", line)
        if not m:
            continue
        # The declaration may wrap: the name is on this line or the next.
        name = re.search(r"\b(dlock_\w+)\s*\(", line + " " + (
            lines[i + 1] if i + 1 < len(lines) else ""))
        if not name:
            continue
        t = SINCE.search(line) or (SINCE.search(lines[i - 1]) if i else None)
        out[name.group(1)] = (int(t.group(1)), int(t.group(2))) if t else None
    return out


def version_h(path):
    text = open(path, encoding="utf-8").read()
    get = lambda k: int(re.search(r"#define DLOCK_%s (\d+)" % k, text).group(1))
    return (get("VERSION_MAJOR"), get("VERSION_MINOR")), get("SOVERSION")


def main():
    lib, src = sys.argv[1], sys.argv[2]
    problems = []
    current, soversion = version_h(os.path.join(src, "include/dlock/version.h"))

    dyn = subprocess.run(["readelf", "-d", lib], capture_output=True,
                         text=True, check=True).stdout
    soname = re.search(r"Library soname: \[(.*?)\]", dyn)
    want = "libdlock.so.%d" % soversion
    if not soname or soname.group(1) != want:
        problems.append("SONAME is %s, want %s (DLOCK_SOVERSION)" %
                        (soname.group(1) if soname else "missing", want))

    syms = subprocess.run(["nm", "-D", "--defined-only", lib],
                          capture_output=True, text=True, check=True).stdout
    exported = {l.split()[-1] for l in syms.splitlines()
                if l.split() and l.split()[-1].startswith("dlock")}

    headers = [os.path.join(src, "include/dlock.h")] + sorted(
        glob.glob(os.path.join(src, "include/dlock/*.h")))
    cur_api, cur_inline = set(), set()
    cur_tags = {}
    for h in headers:
        a, i = declared(h)
        cur_api |= a
        cur_inline |= i
        cur_tags.update(tags(h))

    saved = {}
    for h in glob.glob(os.path.join(src, "tests/abi/*/dlock.h")):
        ver = os.path.basename(os.path.dirname(h))
        major, minor = (int(x) for x in ver.split(".")[:2])
        a, i = declared(h)
        saved[(major, minor)] = a | i
    if not saved:
        problems.append("no saved release header under tests/abi/<version>/")

    required = set(cur_api)
    for names in saved.values():
        required |= names
    for name in sorted(required - exported):
        problems.append("%s is declared but not exported" % name)
    for name in sorted(exported - required):
        problems.append("%s is exported but declared by no header" % name)

    for name in sorted(cur_api | cur_inline):
        t = cur_tags.get(name)
        if t is None:
            problems.append("%s has no DLOCK_SINCE" % name)
            continue
        if t > current:
            problems.append("%s: DLOCK_SINCE%s is after the version %s" %
                            (name, t, current))
        had = [v for v, names in saved.items() if name in names]
        if had and t > min(had):
            problems.append("%s: DLOCK_SINCE%s, but release %s had it" %
                            (name, t, min(had)))
        if not had and saved and t <= max(saved):
            problems.append("%s: DLOCK_SINCE%s, but no saved release up to "
                            "%s has it" % (name, t, max(saved)))

    if problems:
        print("\n".join("FAIL: " + p for p in problems))
        return 1
    print("%s: %d calls exported, all declared and tagged; saved releases %s"
          % (want, len(exported),
             ", ".join("%d.%d" % v for v in sorted(saved))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
