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


# src/<layer>/<file> (docs/design.md, "The layers of src/"), as paths
# relative to src/; a rule that names a file names its base name.
files = sorted(os.path.relpath(os.path.join(d, f), src)
               for d, _, fs in os.walk(src) for f in fs
               if f.endswith((".c", ".h")))

# Rule: no user callback under an internal lock (src/util/callout.c). Every
# internal mutex goes through dlock__mu_lock / _trylock / _unlock (they
# count the locks a thread holds), and on_lock_lost, the log hook and async
# completions are called only from callout.c / log.c.
for f in files:
    if os.path.basename(f) == "callout.c":
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
        if os.path.basename(f) != "log.c" and re.search(r"\blog_fn\s*\(", code):
            findings.append(f"src/{f}:{n}: calls the log hook directly "
                            "(use dlock__log)")
        if re.search(r"->cb\s*\(", code):
            findings.append(f"src/{f}:{n}: calls a completion directly "
                            "(use dlock__callout_done)")

# Rule: no command whose outcome is unknown may act on a later hold
# (request binding, src/proto/proto.h DLOCK__LUA_LATE / DLOCK__LUA_COMMIT).
# Every script of src/ that changes a lock checks its own request's
# tombstone first -- or is named here with the reason it cannot act on a
# later hold. A new script that writes is an error until it does one or
# the other.
BOUND_BY_CONSTRUCTION = {
    "renew": "extends a TTL only; a late copy never shortens one",
    "rw_read_renew": "extends TTLs only",
    "redlock_renew": "extends a TTL only",
    "redlock_token": "raises the counter to a maximum; never lowers it",
    "cancel": "bound to its wait id: its queue entry, its own hand-over's "
              "marker; no later wait has that id",
    "fair_cancel": "removes its own queue entry; takes nothing",
    "decline": "acts only while the hand-over's marker names that wait",
    "force_unlock": "sent at most once (no copy exists)",
    "fair_force": "sent at most once",
    "rw_force": "sent at most once",
    "spin_force_unlock": "sent at most once",
    "client_info": "not a lock: the client's own info key",
    "sem_try_acquire": "once key of its request id (counter.c)",
    "sem_release": "once key of its request id",
    "sem_try_set_permits": "once key of its request id",
    "latch_try_set_count": "once key of its request id",
    "latch_count_down": "once key of its request id",
    "permits_acquire": "a fresh permit id per acquisition (docs/permits.md)",
    "permits_release": "bound to its permit id",
    "permits_update_lease": "bound to its permit id",
    "permits_try_set": "sets the total once (a copy finds it set)",
    "permits_set": "sent for an explicit total; idempotent",
}
WRITES = re.compile(r"'(hset|hdel|set|del|incr|incrby|decrby|pexpire|rpush|"
                    r"lpop|lrem|zadd|zrem|zincrby|hincrby|expire)'")
n_scripts = 0
for f in files:
    if not f.endswith(".c"):
        continue
    text = open(os.path.join(src, f)).read()
    # each script: its name (the first string after the opener) and its
    # body, up to the {0} that ends it
    for m in re.finditer(r'(?:dlock__script\s+g_\w+\s*=\s*\{|\[DLOCK__S_\w+\]'
                         r'\s*=\s*\{)\s*"([a-z_0-9]+)"(.*?)\{0\}', text,
                         re.S):
        name, body = m.group(1), m.group(2)
        n_scripts += 1
        line = text.count("\n", 0, m.start()) + 1
        # Rule: a renewal only extends (a late copy of one -- sent before
        # its hold ended, run after the next hold of the same field began
        # -- can then never cut that hold's TTL). The scripts listed as
        # extending write nothing but through DLOCK__LUA_TTL's extend().
        if BOUND_BY_CONSTRUCTION.get(name, "").startswith("extends"):
            w = WRITES.findall(body)
            if w or "DLOCK__LUA_TTL" not in body or "extend(" not in body:
                findings.append(f"src/{f}:{line}: script '{name}' is listed "
                                "as extending TTLs only but writes "
                                f"{', '.join(sorted(set(w))) or 'no extend()'}"
                                " itself (use DLOCK__LUA_TTL's extend)")
            continue
        if not WRITES.search(body) or "DLOCK__LUA_LATE" in body:
            continue
        if name not in BOUND_BY_CONSTRUCTION:
            findings.append(f"src/{f}:{line}: script '{name}' changes a lock "
                            "but checks no request tombstone "
                            "(DLOCK__LUA_LATE) and is not listed in "
                            "tests/docs/rules_check.py with the reason it "
                            "cannot act on a later hold")

for x in findings:
    print(x)
print(f"rules_check: {n_scripts} scripts")
print(f"rules_check: {len(files)} files, {len(findings)} finding(s)")
sys.exit(1 if findings else 0)
