#!/usr/bin/env python3
"""Side-by-side contended run: dlock against other Redis lock libraries.

Driven by run_peers.sh (which starts the private redis-server). Every peer
runs the SAME scenario as `dlock-bench --only contended`: N processes on ONE
lock, inside it a non-atomic GET then SET+1 of a counter on a second
connection, for a fixed duration, all processes released at the same instant.
Reported per library: acquisitions/s, time-to-acquire p50/p99/max (the
duration of the library's acquire call), worker min/max acquisitions
(fairness), failed acquires (timeouts/errors), lost updates
(acquisitions - final counter; anything but 0 is a mutual-exclusion bug).

Modes:
  peers.py run --sock PATH --workers N --secs S --rounds R --bench EXE
               [--node-dir DIR] [--python PY]
  peers.py pyworker CONFIG SOCK LOCK COUNTER START SECS   (internal)
"""
import argparse
import json
import os
import subprocess
import sys
import time


def pct(sorted_vals, q):
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


# ---- the python peer (redis-py's Lock), one process per worker ----------

def pyworker(cfg_json, sock, lock_key, counter_key, start, secs):
    import redis  # python3-redis

    cfg = json.loads(cfg_json)
    r = redis.Redis(unix_socket_path=sock)
    data = redis.Redis(unix_socket_path=sock)
    r.ping()
    data.ping()
    # Barrier: tell the orchestrator we are connected, get the start time.
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    start = float(sys.stdin.readline() or start)
    end = start + float(secs)
    while time.time() < start:
        time.sleep(min(0.01, max(0.0, start - time.time())))
    lat, fail = [], 0
    while time.time() < end:
        lk = r.lock(lock_key, timeout=10, **cfg)
        t0 = time.perf_counter_ns()
        if not lk.acquire():
            fail += 1
            continue
        lat.append((time.perf_counter_ns() - t0) / 1000.0)
        v = int(data.get(counter_key) or 0)
        data.set(counter_key, v + 1)
        try:
            lk.release()
        except Exception:
            fail += 1
    sys.stdout.write(json.dumps({"count": len(lat), "fail": fail,
                                 "lat_us": lat}) + "\n")


# ---- orchestration ------------------------------------------------------

def redis_cmd(sock, *args):
    # Counter reads and key cleanup go through redis-cli (ships with
    # redis-server), so the orchestrator itself needs no client library.
    out = subprocess.run(["redis-cli", "-s", sock] + list(args),
                         stdout=subprocess.PIPE, universal_newlines=True,
                         check=True).stdout.strip()
    return out


def run_workers(argvs, env=None, cwd=None):
    """Starts every worker, waits until each has connected (it prints
    "ready"), then sends all of them the same start time on stdin."""
    procs = [subprocess.Popen(a, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE,
                              universal_newlines=True, env=env, cwd=cwd)
             for a in argvs]
    for p in procs:
        p.stdout.readline()  # "ready", or "" if it died (reported below)
    start = "%.6f\n" % (time.time() + 0.2)
    for p in procs:
        try:
            p.stdin.write(start)
            p.stdin.close()
        except OSError:
            pass
    res, errs = [], []
    for p in procs:
        try:
            p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        out, err = p.stdout.read(), p.stderr.read()
        if p.returncode == 0 and out.strip():
            res.append(json.loads(out.strip().splitlines()[-1]))
        else:
            errs.append((err or "").strip()[-300:] or "exit %s" % p.returncode)
    return res, errs


def summarize(name, res, errs, secs, counter_val, workers):
    lat = sorted(x for r in res for x in r["lat_us"])
    total = sum(r["count"] for r in res)
    counts = [r["count"] for r in res]
    return {
        "library": name,
        "acq_per_s": total / secs,
        "p50_ms": pct(lat, 0.50) / 1000.0,
        "p99_ms": pct(lat, 0.99) / 1000.0,
        "max_ms": (lat[-1] / 1000.0) if lat else float("nan"),
        "worker_min": min(counts) if counts else 0,
        "worker_max": max(counts) if counts else 0,
        "failed": sum(r["fail"] for r in res),
        "lost": total - counter_val,
        "workers_ok": "%d/%d" % (len(res), workers),
        "note": "; ".join(errs[:1]),
    }


def run_peer(a, tag, name, argv_for_worker, env=None, cwd=None):
    run = "peers:%d:%s" % (os.getpid(), tag)
    lock_key, counter_key = run + ":lock", run + ":counter"
    start = time.time() + 60  # placeholder: the barrier sends the real one
    argvs = [argv_for_worker(lock_key, counter_key, "%.6f" % start)
             for _ in range(a.workers)]
    sys.stderr.write("# peers: %s, %d processes, %.1f s\n"
                     % (name, a.workers, a.secs))
    res, errs = run_workers(argvs, env=env, cwd=cwd)
    cv = redis_cmd(a.sock, "GET", counter_key)
    counter_val = int(cv) if cv.isdigit() else 0
    redis_cmd(a.sock, "DEL", lock_key, counter_key)
    return summarize(name, res, errs, a.secs, counter_val, a.workers)


def run_dlock(a, exe=None, label="dlock (this project, C)"):
    exe = exe or a.bench
    sys.stderr.write("# peers: %s (dlock-bench --only contended), "
                     "%d processes, %.1f s\n" % (label, a.workers, a.secs))
    p = subprocess.run([exe, "--url", "unix://" + a.sock, "--only",
                        "contended", "--workers", str(a.workers),
                        "--contended-secs", str(a.secs), "--serial-secs",
                        str(min(a.secs, 3.0)), "--reps", "1", "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=600)
    js = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not js:
        return None, "dlock-bench failed: " + p.stderr.strip()[-300:]
    c = json.loads(js[-1])["scenarios"]["contended"]
    return ({
        "library": label,
        "acq_per_s": c["acq_per_s"], "p50_ms": c["acquire_p50_ms"],
        "p99_ms": c["acquire_p99_ms"], "max_ms": c["acquire_max_ms"],
        "worker_min": c["worker_min"], "worker_max": c["worker_max"],
        "failed": 0, "lost": c["lost_updates"],
        "workers_ok": "%d/%d" % (a.workers, a.workers),
        "note": "serial reference (1 process alone) %.0f acq/s"
                % c["serial_acq_per_s"],
    }, None)


def fmt(v, digits=2):
    if isinstance(v, float):
        if v != v:
            return "-"
        if abs(v) >= 100:
            return "%.0f" % v
        return "%.*f" % (digits, v)
    return str(v)


def median_row(rs):
    rs = sorted(rs, key=lambda r: r["acq_per_s"])
    row = dict(rs[len(rs) // 2])
    row["range"] = "%s-%s" % (fmt(rs[0]["acq_per_s"]), fmt(rs[-1]["acq_per_s"]))
    # Lost updates and failures are summed over every round: one lost
    # update anywhere is a bug, whichever round it happened in.
    row["lost"] = sum(r["lost"] for r in rs)
    row["failed"] = sum(r["failed"] for r in rs)
    return row


def peer_specs(a):
    """(name, run_once) for every peer available; notes for the skipped."""
    specs, notes = [], []
    here = os.path.dirname(os.path.abspath(__file__))
    specs.append(("dlock (this project, C)", lambda: run_dlock(a)))
    if a.base_bench:
        # Another build of dlock-bench (e.g. the commit before a change),
        # measured in the same run: a before/after pair from one hour.
        lbl = "base dlock (%s)" % a.base_label
        specs.append((lbl, lambda: run_dlock(a, a.base_bench, lbl)))

    py = a.python
    if py:
        me = os.path.abspath(__file__)
        for tag, name, cfg in [
            ("pyredis-default",
             "redis-py %s Lock (defaults: polls, sleep 0.1 s)" % a.pyver, {}),
            ("pyredis-bt1",
             "redis-py %s Lock (blocking_timeout=1 s, sleep 0.1 s)" % a.pyver,
             {"blocking_timeout": 1}),
            ("pyredis-sleep1ms",
             "redis-py %s Lock (tuned: sleep=0.001 s)" % a.pyver,
             {"sleep": 0.001}),
        ]:
            cj = json.dumps(cfg)
            specs.append((name, lambda tag=tag, name=name, cj=cj: (run_peer(
                a, tag, name, lambda lk, ck, st: [
                    py, me, "pyworker", cj, a.sock, lk, ck, st,
                    str(a.secs)]), None)))
    else:
        notes.append("redis-py skipped: no python3 with the redis module "
                     "(apt-get install -y python3-redis)")

    if a.node_dir:
        env = dict(os.environ)
        env["NODE_PATH"] = os.path.join(a.node_dir, "node_modules")
        js = os.path.join(here, "worker.js")
        vers = {}
        for pkg in ("redlock", "redis-semaphore", "ioredis"):
            try:
                with open(os.path.join(a.node_dir, "node_modules", pkg,
                                       "package.json")) as f:
                    vers[pkg] = json.load(f)["version"]
            except (OSError, ValueError, KeyError):
                vers[pkg] = "?"
        for tag, lib, name, cfg in [
            ("redlock-default", "redlock",
             "node redlock %s (defaults: retry every 200±100 ms; "
             "retryCount -1)" % vers["redlock"], {"retryCount": -1}),
            ("redlock-tuned", "redlock",
             "node redlock %s (tuned: retryDelay 2 ms, jitter 1 ms)"
             % vers["redlock"],
             {"retryCount": -1, "retryDelay": 2, "retryJitter": 1}),
            ("rsem-default", "redis-semaphore",
             "node redis-semaphore %s Mutex (defaults: retry every 10 ms)"
             % vers["redis-semaphore"], {}),
            ("rsem-tuned", "redis-semaphore",
             "node redis-semaphore %s Mutex (tuned: retryInterval 1 ms)"
             % vers["redis-semaphore"], {"retryInterval": 1}),
        ]:
            cj = json.dumps(cfg)
            specs.append((name, lambda tag=tag, lib=lib, name=name, cj=cj: (
                run_peer(a, tag, name, lambda lk, ck, st: [
                    "node", js, lib, cj, a.sock, lk, ck, st, str(a.secs)],
                    env=env, cwd=a.node_dir), None)))
        notes.append("node peers on ioredis %s" % vers["ioredis"])
    else:
        notes.append(a.node_note or "node peers skipped")
    return specs, notes


def main_run(a):
    specs, notes = peer_specs(a)
    results = {name: [] for name, _ in specs}
    load0 = os.getloadavg()[0]
    # Rounds rotate the order, so a burst of load on this shared machine
    # does not always fall on the same library; each library's row is its
    # median round by acq/s.
    for rnd in range(a.rounds):
        k = rnd % len(specs)
        for name, fn in specs[k:] + specs[:k]:
            row, err = fn()
            if row:
                results[name].append(row)
            else:
                notes.append("%s, round %d: %s" % (name, rnd + 1, err))
    load1 = os.getloadavg()[0]
    rows = [median_row(results[n]) for n, _ in specs if results[n]]

    print("## Contended, side by side (%d processes on one lock, GET+SET of a "
          "counter inside, %g s per run, %d round%s, same private "
          "redis-server, unix socket)\n"
          % (a.workers, a.secs, a.rounds, "" if a.rounds == 1 else "s"))
    print("| library | acq/s (median round) | acq/s range | acquire p50 ms "
          "| acquire p99 ms | acquire max ms | worker min/max | failed "
          "acquires | lost updates |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print("| %s | %s | %s | %s | %s | %s | %s/%s | %s | %s |" % (
            r["library"], fmt(r["acq_per_s"]), r["range"],
            fmt(r["p50_ms"], 3), fmt(r["p99_ms"], 3), fmt(r["max_ms"], 2),
            r["worker_min"], r["worker_max"], r["failed"], r["lost"]))
    print()
    # Issue 30's table: the policy's three numbers, dlock's row from this
    # very run, and how it compares with the best peer.
    print("## dlock against the best peer (issue 30: >= 1.2x the best peer's "
          "acq/s, max wait <= 50 ms, least/best served >= 0.8, 0 lost)\n")
    print("| library | acq/s | per-worker min..max | least/best | max wait "
          "| lost updates |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in sorted(rows, key=lambda r: -r["acq_per_s"]):
        fair = (r["worker_min"] / r["worker_max"]) if r["worker_max"] else 0.0
        name = r["library"]
        if name.startswith("dlock"):
            name = "**%s**" % name
        print("| %s | %s | %s..%s | %.2f | %s ms | %s |" % (
            name, fmt(r["acq_per_s"]), r["worker_min"], r["worker_max"], fair,
            fmt(r["max_ms"], 1), r["lost"]))
    mine = [r for r in rows if r["library"].startswith("dlock")]
    peers = [r for r in rows if not r["library"].startswith("dlock")
             and not r["library"].startswith("base dlock")]
    if mine and peers:
        d, best = mine[0], max(peers, key=lambda r: r["acq_per_s"])
        fair = (d["worker_min"] / d["worker_max"]) if d["worker_max"] else 0.0
        ratio = d["acq_per_s"] / best["acq_per_s"] if best["acq_per_s"] else 0
        ok = (ratio >= 1.2 and d["max_ms"] <= 50 and fair >= 0.8
              and d["lost"] == 0)
        print("\ndlock / best peer (%s): %.2fx; max wait %.1f ms; least/best "
              "%.2f; lost %d -> %s" % (best["library"], ratio, d["max_ms"],
                                       fair, d["lost"],
                                       "MET" if ok else "MISSED"))
    print()
    for r in rows:
        if r["workers_ok"] != "%d/%d" % (a.workers, a.workers):
            notes.append("%s: only %s workers finished" % (r["library"],
                                                          r["workers_ok"]))
        if r["note"]:
            notes.append("%s: %s" % (r["library"], r["note"]))
    notes.append("load average (1 min) %.2f before, %.2f after, on %d CPUs"
                 % (load0, load1, os.cpu_count() or 0))
    for n in notes:
        print("- " + n)
    print(json.dumps({"peers": rows, "workers": a.workers, "secs": a.secs,
                      "rounds": a.rounds, "notes": notes}))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "pyworker":
        pyworker(*sys.argv[2:8])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["run"])
    ap.add_argument("--sock", required=True)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--secs", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--node-dir", default="")
    ap.add_argument("--node-note", default="")
    ap.add_argument("--python", default="")
    ap.add_argument("--pyver", default="")
    ap.add_argument("--base-bench", default="")
    ap.add_argument("--base-label", default="base")
    main_run(ap.parse_args())


if __name__ == "__main__":
    main()
