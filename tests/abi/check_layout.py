#!/usr/bin/env python3
"""check_layout.py CC SOURCE_DIR -- an ABI dump comparison (docs/abi.md).

For include/ and for every saved release tests/abi/<version>/, compiles a
tiny program against that header with CC and dumps what a program built
against it bakes in: the offset and size of every field of the public
structs, their sizes, and the error codes. Then, for every saved release of
the SAME ABI generation (DLOCK_SOVERSION; a saved version.h without it means
its major version):
- dlock_config, dlock_status: every field of the release is still there at
  the same offset with the same size, and the struct did not shrink (new
  fields are appended; the layout record lets the library serve both);
- dlock_holder: identical (callers index arrays of it: it cannot grow);
- every error code keeps its number.
A release of an earlier generation is only reported. Exit 0, or 1 listing
every break: the fix is to undo it, or to raise DLOCK_SOVERSION.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

GROWING = ("dlock_config", "dlock_status")
FROZEN = ("dlock_holder",)


def struct_fields(header, name):
    """Field names of `typedef struct name {...} name;` in the header."""
    text = re.sub(r"/\*.*?\*/", " ", open(header, encoding="utf-8").read(),
                  flags=re.S)
    m = re.search(r"typedef\s+struct\s+%s\s*\{(.*?)\}\s*%s\s*;" % (name, name),
                  text, re.S)
    if not m:
        return None
    fields = []
    for decl in m.group(1).split(";"):
        decl = decl.strip()
        if not decl:
            continue
        fp = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)
        fields.append(fp.group(1) if fp else
                      re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", decl).group(1))
    return fields


def dump(cc, incdir, tmp):
    header = os.path.join(incdir, "dlock.h")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "dlock.h"',
             "int main(void) {"]
    for s in GROWING + FROZEN:
        fields = struct_fields(header, s)
        if fields is None:
            continue
        lines.append('  printf("size %s %%zu\\n", sizeof(%s));' % (s, s))
        for f in fields:
            lines.append('  printf("field %s.%s %%zu %%zu\\n", offsetof(%s, %s),'
                         ' sizeof(((%s *)0)->%s));' % (s, f, s, f, s, f))
    lines += ['#define P(n, v, m) printf("errno " #n " %d\\n", (int)(v));',
              "  DLOCK_ERRNO_MAP(P)", "  return 0;", "}"]
    src = os.path.join(tmp, "dump.c")
    exe = os.path.join(tmp, "dump")
    open(src, "w").write("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-I", incdir, "-o", exe, src], check=True)
    out = subprocess.run([exe], capture_output=True, text=True,
                         check=True).stdout
    return dict(l.split(" ", 2)[1:] for l in out.splitlines())


def generation(incdir):
    text = open(os.path.join(incdir, "dlock/version.h"), encoding="utf-8").read()
    m = re.search(r"#define DLOCK_SOVERSION (\d+)", text) or re.search(
        r"#define DLOCK_VERSION_MAJOR (\d+)", text)
    return int(m.group(1))


def compare(old, new):
    """The breaks between two dumps (an older release's, the current)."""
    problems = []
    for key, val in sorted(old.items()):
        struct = key.split(".")[0]
        if key in GROWING:
            if key not in new or int(new[key]) < int(val):
                problems.append("sizeof %s: %s, now %s (may only grow)" %
                                (key, val, new.get(key)))
        elif new.get(key) != val:
            what = ("offset size" if "." in key else
                    "sizeof" if struct in FROZEN else "value")
            problems.append("%s (%s): %s, now %s%s" % (
                key, what, val, new.get(key),
                " (frozen)" if struct in FROZEN else ""))
    for key in new:
        if key.split(".")[0] in FROZEN and key not in old:
            problems.append("%s: new field in a frozen struct" % key)
    return problems


def main():
    cc, src = sys.argv[1], sys.argv[2]
    current_dir = os.path.join(src, "include")
    gen = generation(current_dir)
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        current = dump(cc, current_dir, tmp)
        saved = sorted(glob.glob(os.path.join(src, "tests/abi/*/dlock.h")))
        for h in saved:
            d = os.path.dirname(h)
            ver = os.path.basename(d)
            old = dump(cc, d, tmp)
            diff = compare(old, current)
            if generation(d) != gen:
                print("%s: ABI generation %d, now %d: %d layout changes "
                      "allowed" % (ver, generation(d), gen, len(diff)))
                continue
            problems += ["%s: %s" % (ver, p) for p in diff]
            print("%s: same ABI generation %d, %d fields and codes checked" %
                  (ver, gen, len(old)))
    if problems:
        print("\n".join("FAIL: " + p for p in problems))
        print("Undo the change, or raise DLOCK_SOVERSION (docs/abi.md).")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
