#!/usr/bin/env python3
"""CI smoke of dlock-bench (ctest case bench.quick_smoke).

Runs `dlock-bench --quick --json` (smaller still, to stay well under 40 s even
in sanitizer builds) on its own private redis-server and checks what can be
checked without timing: exit status 0, the last line is one JSON object, every
target row of issue 4 is present with a PASS or MISS result (no SKIP: every
scenario ran), and the correctness figures are exact: 0 lost updates, 0 locks
lost under the watchdog, 2 script calls per uncontended pair. Speed (PASS vs
MISS) is never asserted here: that is what the benchmark reports.

usage: smoke.py /path/to/dlock-bench
"""
import json
import shutil
import subprocess
import sys

EXPECTED_TARGETS = [
    "uncontended.p50.fresh", "uncontended.p50.same", "uncontended.cpu.fresh",
    "uncontended.cpu.same", "uncontended.scripts.fresh",
    "uncontended.scripts.same", "many.threads", "many.procs",
    "many.procs.raw", "many.procs.floor", "many.layout", "many.procs.layout",
    "contended.rate", "contended.p99", "contended.lost", "watchdog.cpu",
    "watchdog.renewed", "watchdog.batches", "watchdog.lost", "watchdog.mem",
    "handoff.p50", "async.rate", "async.cpu",
]


def fail(msg, out=""):
    sys.stderr.write(out[-4000:])
    sys.stderr.write("\nbench.quick_smoke FAILED: %s\n" % msg)
    sys.exit(1)


def main():
    exe = sys.argv[1]
    cmd = [exe, "--quick", "--json", "--pairs", "1000", "--secs", "0.5",
           "--contended-secs", "1", "--serial-secs", "0.5", "--wd-locks",
           "5000", "--handoff-rounds", "100", "--threads", "4", "--procs",
           "4", "--workers", "4"]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120,
                           universal_newlines=True)
    except subprocess.TimeoutExpired:
        fail("dlock-bench did not finish within 120 s")
    out = p.stdout
    if p.returncode != 0:
        fail("exit status %d" % p.returncode, out)
    lines = [l for l in out.splitlines() if l.strip()]
    # stderr progress lines are interleaved; the JSON object is the last
    # line starting with '{'.
    js = [l for l in lines if l.startswith("{")]
    if not js:
        fail("no JSON line", out)
    try:
        doc = json.loads(js[-1])
    except ValueError as e:
        fail("last JSON line does not parse: %s" % e, out)
    if "## Targets (issue 4)" not in out:
        fail("no targets table", out)
    got = {t["id"]: t for t in doc.get("targets", [])}
    for tid in EXPECTED_TARGETS:
        if tid not in got:
            fail("target row %s missing" % tid, out)
        if got[tid]["result"] not in ("PASS", "MISS"):
            fail("target %s: result %s" % (tid, got[tid]["result"]), out)
    s = doc["scenarios"]
    checks = [
        (s["contended"]["lost_updates"] == 0, "contended lost updates"),
        (s["contended"]["serial_lost"] == 0, "serial lost updates"),
        (s["watchdog"]["lost_locks"] == 0, "watchdog lost locks"),
        (s["watchdog"]["failed_renewals"] == 0, "watchdog failed renewals"),
        (s["uncontended"]["fresh_scripts"] == 2, "scripts per pair (fresh)"),
        (s["uncontended"]["same_scripts"] == 2, "scripts per pair (same)"),
        (s["contended"]["acquisitions"] > 0, "contended acquisitions"),
        (s["handoff"]["rounds"] == 100, "handoff rounds"),
        (s["contended-spin"]["spin_lost_updates"] == 0, "spin lost updates"),
        (s["contended-spin"]["pubsub_lost_updates"] == 0,
         "contended-spin pub/sub lost updates"),
    ]
    # issue 42: the etcd rows, when etcd is installed (else a note says so)
    if shutil.which("etcd"):
        for tid in ("etcd.uncontended.p50", "etcd.contended.lost"):
            if got.get(tid, {}).get("result") not in ("PASS", "MISS"):
                fail("target %s: %s" % (tid, got.get(tid)), out)
        checks.append((s["etcd"]["lost"] == 0, "etcd lost updates"))
    for ok, what in checks:
        if not ok:
            fail(what, out)
    print("bench.quick_smoke: %d target rows, wall %.1f s" %
          (len(got), doc["wall_s"]))


if __name__ == "__main__":
    main()
