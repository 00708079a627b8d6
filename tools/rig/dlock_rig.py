#!/usr/bin/env python3
"""dlock-rig -- the background articles' test rig with real parts (issue 16).

A private redis-server, N dlock-stockd instances on free loopback ports,
nginx in front of them (round robin, its own config, logs and pid file in
the rig's temp dir) and ab sending the load: once per strategy, the stock
reset to 100 first. Reports per strategy what was sent, what nginx logged,
what each instance served, orders, final stock, oversold, errors,
throughput, p50/p99 latency and a one-line lesson.

Every process is started in its own process group (and dies with the rig
through PR_SET_PDEATHSIG); the rig stops them all however it ends --
normally, on an error, on Ctrl-C or SIGTERM -- and then checks that none of
its ports is still listening.

The build copies this file to <build>/tools/rig/dlock-rig (make rig runs
it); the tests import it as a module (tests/rig/).
"""

import argparse
import ctypes
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_STRATEGIES = ["none", "local", "setnx-expire", "owner-lua", "dlock",
                      "segmented", "atomic", "redlock"]
KNOWN_STRATEGIES = DEFAULT_STRATEGIES + ["setnx", "getset", "set-nx-px", "fair",
                                         "spin"]
PRODUCT = "sku1"
EX_USAGE, EX_UNAVAILABLE, EX_SOFTWARE = 64, 69, 70


class RigError(Exception):
    """The rig itself failed (a part did not start, a tool is missing)."""


# ---- processes -------------------------------------------------------------

_libc = None


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _die_with_parent():
    """preexec_fn: SIGKILL when the rig dies, even by SIGKILL; and the stop
    signals the rig blocks while it starts a child unblocked again."""
    global _libc
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Procs:
    """Every process the rig started, each in its own process group."""

    def __init__(self):
        self.items = []  # (name, Popen)

    def start(self, name, argv, **kw):
        # Ctrl-C between the fork and the bookkeeping would leave a child
        # nobody stops (and an nginx worker that outlives its master):
        # the stop signals wait until the child is on the list.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            p = subprocess.Popen(argv, start_new_session=True,
                                 preexec_fn=_die_with_parent, **kw)
            self.items.append((name, p))
        except FileNotFoundError as e:
            raise RigError("%s: cannot run %s: %s" % (name, argv[0], e))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return p

    def stop(self, p, timeout=10.0, sig=signal.SIGTERM):
        """Signal p's group, wait (bounded), then SIGKILL the group.
        Returns p's exit status."""
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # the group may outlive its leader (nginx workers): kill what is
        # left, and wait (bounded) until the kernel has really ended it
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if p.poll() is None:
            p.wait(5)
        end = time.monotonic() + 5
        while group_alive(p.pid) and time.monotonic() < end:
            time.sleep(0.01)
        return p.returncode

    def stop_all(self):
        statuses = {}
        for name, p in reversed(self.items):
            statuses[name] = self.stop(p, timeout=5.0)
        self.items = []
        return statuses

    def forget(self, p):
        self.items = [(n, q) for n, q in self.items if q is not p]


def group_alive(pgid):
    """Is a process of group pgid still running (zombies do not count)?"""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in "ZX":
            return True
    return False


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def listening(port):
    s = socket.socket()
    s.settimeout(0.5)
    try:
        s.connect(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def http(method, url, timeout=10.0):
    """(status, body) of one request; status 0 when it failed."""
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


def children(pid):
    """The pids whose parent is pid (from /proc; a process that exits
    while it is read is left out)."""
    out = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        fields = st[st.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.add(int(d))
    return out


def poll(cond, timeout, what):
    """Polls cond() every 20-100 ms until it is true; RigError after
    timeout seconds."""
    end = time.monotonic() + timeout
    delay = 0.02
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    raise RigError("%s: not ready after %.0f s" % (what, timeout))


def find_tool(name, given, near=None):
    if given:
        return given
    if near:
        for cand in near:
            if os.access(cand, os.X_OK):
                return cand
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if not path:
        raise RigError("%s is not installed (scripts/install-deps.sh rig)"
                       % name)
    return path


# ---- the parts ---------------------------------------------------------------

class Redis:
    def __init__(self, procs, tmp, name):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.sock = os.path.join(self.dir, "redis.sock")
        self.url = "unix://" + self.sock
        conf = os.path.join(self.dir, "redis.conf")
        with open(conf, "w") as f:
            f.write("port 0\nunixsocket %s\nunixsocketperm 700\n"
                    "save \"\"\nappendonly no\ndir %s\nlogfile %s\n"
                    % (self.sock, self.dir,
                       os.path.join(self.dir, "redis.log")))
        server = find_tool("redis-server", None)
        self.proc = procs.start(name, [server, conf],
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        poll(self._ready, 10, name)

    def _ready(self):
        if self.proc.poll() is not None:
            raise RigError("redis-server exited (%s)" % self.dir)
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(1)
        try:
            s.connect(self.sock)
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False
        finally:
            s.close()


class Stockd:
    """One dlock-stockd instance on a free port (it picks it: port 0)."""

    def __init__(self, procs, binary, tmp, index, strategy, redis, redlock,
                 extra):
        self.procs = procs
        self.log = os.path.join(tmp, "stockd-%s-%d.log" % (strategy, index))
        argv = [binary, "--listen", "127.0.0.1:0", "--redis", redis.url,
                "--strategy", strategy, "--products", PRODUCT] + extra
        for r in redlock if strategy == "redlock" else []:
            argv += ["--redlock", r.url]
        self.errf = open(self.log, "w")
        self.proc = procs.start("stockd-%d" % index, argv,
                                stdout=subprocess.PIPE, stderr=self.errf)
        line = self._first_line(20.0)
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if not m:
            raise RigError("dlock-stockd did not start: %s%s"
                           % (line.strip(), self._log_tail()))
        self.port = int(m.group(1))
        self.addr = "127.0.0.1:%d" % self.port
        self.url = "http://" + self.addr

    def _first_line(self, timeout):
        buf = b""
        end = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in buf and time.monotonic() < end:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buf += chunk
        return buf.decode(errors="replace")

    def _log_tail(self):
        self.errf.flush()
        try:
            with open(self.log) as f:
                t = f.read()[-400:].strip()
            return (" (" + t + ")") if t else ""
        except OSError:
            return ""

    def stop(self):
        """SIGTERM, bounded wait; the exit status (0: a clean stop)."""
        rc = self.procs.stop(self.proc, timeout=15.0)
        self.procs.forget(self.proc)
        self.proc.stdout.close()
        self.errf.close()
        return rc


NGINX_CONF = """\
{user}daemon off;
master_process on;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  log_format rig '$status $upstream_addr $request_time "$request"';
  access_log {dir}/access.log rig;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  upstream stockd {{
{servers}
  }}
  server {{
    listen 127.0.0.1:{port} backlog=1024;
{control}    location / {{
      proxy_pass http://stockd;
      proxy_read_timeout 60s;
    }}
  }}
}}
"""


class Nginx:
    """nginx in front of the instances: round robin, everything in dir."""

    def __init__(self, procs, binary, tmp, name, instances, port=0,
                 control=None):
        self.procs = procs
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.access = os.path.join(self.dir, "access.log")
        self.conf = os.path.join(self.dir, "nginx.conf")
        self.control = control  # --serve: /rig/ goes to the rig itself
        self.user = ""
        if os.geteuid() == 0:  # else the workers would become "nobody"
            import grp
            import pwd
            self.user = "user %s %s;\n" % (pwd.getpwuid(0).pw_name,
                                           grp.getgrgid(0).gr_name)
        last = None
        for _ in range(5 if not port else 1):  # a free port may be taken
            self.port = port or free_port()   # before nginx binds it
            self._write(instances)
            self.proc = procs.start(
                name, [binary, "-p", self.dir, "-c", self.conf, "-e",
                       os.path.join(self.dir, "error.log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                poll(self._ready, 10, "nginx")
                self.url = "http://127.0.0.1:%d" % self.port
                return
            except RigError as e:
                last = e
                procs.stop(self.proc)
                procs.forget(self.proc)
        raise RigError("nginx did not start: %s%s" % (last, self._errors()))

    def _write(self, instances):
        servers = "\n".join("    server %s max_fails=0;" % s.addr
                            for s in instances)
        control = ""
        if self.control:
            control = ("    location /rig/ {\n      proxy_pass http://%s;\n"
                       "    }\n" % self.control)
        with open(self.conf, "w") as f:
            f.write(NGINX_CONF.format(user=self.user, dir=self.dir,
                                      servers=servers, port=self.port,
                                      control=control))

    def switch(self, instances, strategy, timeout=20.0):
        """--serve: sends the traffic to other instances (a new config and
        SIGHUP: nginx reloads without dropping a request) and waits until
        it does: healthz through nginx names the new strategy, and every
        worker of the old configuration has exited. Until then an old
        worker may still accept a connection and pass it to the old
        instances, which the caller stops next (a run under load once had
        32 requests refused that way: 502s)."""
        self._write(instances)
        old_workers = children(self.proc.pid)
        os.kill(self.proc.pid, signal.SIGHUP)
        want = set(s.addr for s in instances)

        def routed():
            if self.proc.poll() is not None:
                raise RigError("nginx exited on reload%s" % self._errors())
            seen = set()
            for _ in range(2 * len(instances)):
                code, body = http("GET", self.url + "/healthz", timeout=5)
                parts = body.split()
                if code != 200 or len(parts) < 3 or parts[2] != strategy:
                    return False
                seen.add(parts[1])
            return seen == want
        poll(routed, timeout, "nginx reload")
        poll(lambda: not (old_workers & children(self.proc.pid)), timeout,
             "nginx's old workers to exit after the reload")

    def _ready(self):
        if self.proc.poll() is not None:
            raise RigError("nginx exited")
        return listening(self.port)

    def _errors(self):
        try:
            with open(os.path.join(self.dir, "error.log")) as f:
                return " (" + f.read()[-400:].strip() + ")"
        except OSError:
            return ""

    def stop(self):
        rc = self.procs.stop(self.proc, timeout=10.0, sig=signal.SIGQUIT)
        self.procs.forget(self.proc)
        return rc

    def log_size(self):
        try:
            return os.path.getsize(self.access)
        except OSError:
            return 0

    def logged(self, offset=0):
        """The /deduct_stock lines of the access log (from byte offset):
        [(status, upstream)]."""
        out = []
        try:
            with open(self.access) as f:
                f.seek(offset)
                for line in f:
                    if "/deduct_stock" not in line:
                        continue
                    out.append(parse_access(line))
        except OSError:
            pass
        return out


def parse_access(line):
    """(status, upstream) of one line of the rig's log format,
    '$status $upstream_addr $request_time "$request"'. A request nginx
    passed to more than one upstream (an error, then the next server) lists
    them all, "a, b" (or "a : b" across an internal redirect): the last one
    answered. "-" when no upstream was contacted."""
    head = line.split(' "', 1)[0].split()
    if not head:
        return ("-", "-")
    ups = head[1:-1] if len(head) > 2 else ["-"]
    last = re.split(r",|\s:\s", " ".join(ups))[-1].strip()
    return (head[0], last or "-")


# ---- the load ------------------------------------------------------------------

def run_ab(procs, ab, url, requests, concurrency, timeout):
    argv = [ab, "-q", "-l", "-r", "-s", "60", "-m", "POST",
            "-n", str(requests), "-c", str(concurrency), url]
    try:
        p = procs.start("ab", argv, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE)
    except RigError:
        raise RigError("ab is not installed (apache2-utils)")
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RigError("ab did not finish in %.0f s" % timeout)
    procs.forget(p)
    r = subprocess.CompletedProcess(argv, p.returncode, out, err)
    text = r.stdout.decode(errors="replace")
    if r.returncode != 0 and "Complete requests" not in text:
        raise RigError("ab failed: %s" % r.stderr.decode(errors="replace")
                       .strip()[-300:])

    def num(pat, default=0.0):
        m = re.search(pat, text, re.M)
        return float(m.group(1)) if m else default
    return {
        "complete": int(num(r"^Complete requests:\s+(\d+)")),
        "failed": int(num(r"^Failed requests:\s+(\d+)")),
        "throughput": num(r"^Requests per second:\s+([\d.]+)"),
        "p50_ms": num(r"^\s+50%\s+(\d+)"),
        "p99_ms": num(r"^\s+99%\s+(\d+)"),
    }


# ---- one strategy ------------------------------------------------------------

def lesson(st, res):
    if res["oversold"] > 0:
        return "oversold: " + (st.get("lesson") or "")
    if res["lost_updates"] > 0:
        return ("lost updates: %d orders, but the stock fell by %d: %s"
                % (res["orders"], st["initial"] - st["stock"],
                   st.get("lesson") or ""))
    if res["errors"] > 0:
        what = ", ".join("%s %s" % (n, k) for k, n in
                         sorted(res.get("error_statuses", {}).items()))
        return ("errors: requests failed (%s; see the instances' and "
                "nginx's logs)" % (what or "unknown"))
    if st.get("hint"):
        return "correct here (dlock-seckill: %s)" % st["hint"]
    return "correct: every item sold once, nothing oversold"


def run_strategy(rig, name):
    a = rig.args
    insts = []
    nginx = None
    try:
        for i in range(a.instances):
            insts.append(Stockd(rig.procs, rig.stockd, rig.tmp, i, name,
                                rig.redis, rig.redlock, rig.stockd_extra))
        nginx = Nginx(rig.procs, rig.nginx, rig.tmp, "nginx-" + name, insts)
        code, body = http("POST", "%s/reset?product=%s&stock=%d"
                          % (insts[0].url, PRODUCT, a.stock))
        if code != 200:
            raise RigError("reset failed: %d %s" % (code, body.strip()))
        if rig.on_ready:
            rig.on_ready(name, insts, nginx)
        ab = run_ab(rig.procs, rig.ab, "%s/deduct_stock?product=%s" % (nginx.url,
                                                             PRODUCT),
                    a.requests, a.concurrency, a.ab_timeout)
        code, body = http("GET", "%s/stock?product=%s" % (insts[0].url,
                                                          PRODUCT))
        if code != 200:
            raise RigError("reading the stock failed: %d %s"
                           % (code, body.strip()))
        st = json.loads(body)
        if rig.on_done:
            rig.on_done(name, insts, nginx, st)
    finally:
        statuses = {}
        if nginx:
            nginx.stop()
        for s in insts:
            statuses[s.addr] = s.stop()
    res = measure(a, name, insts, ab, st, nginx.logged())
    rig.ports += [s.port for s in insts] + [nginx.port]
    rig.unclean += ["%s %s: exit %s" % (name, a, rc)
                    for a, rc in statuses.items() if rc != 0]
    return res


def measure(a, name, insts, ab, st, logged):
    """One strategy's result: what ab sent, what nginx logged and passed to
    each instance, and what Redis says (st: the instances' /stock)."""
    per = [sum(1 for _, up in logged if up == s.addr) for s in insts]
    bad_status = {}
    for status, _ in logged:
        if status not in ("200", "409"):
            bad_status[status] = bad_status.get(status, 0) + 1
    bad = sum(bad_status.values())
    unanswered = a.requests - ab["complete"]
    res = {
        "name": name,
        "requests": a.requests,
        "nginx_logged": len(logged),
        "per_instance": per,
        # purchases (orders) each instance made, not requests
        "purchases_per_instance": [st.get("per_instance", {}).get(s.addr, 0)
                                   for s in insts],
        "orders": st["orders"],
        "final_stock": st["stock"],
        "initial": st["initial"],
        "oversold": st["oversold"],
        "errors": bad + max(unanswered, 0),
        # what the errors were: nginx's statuses other than 200/409, and
        # requests ab sent that never completed
        "error_statuses": dict(bad_status, **({"unanswered": unanswered}
                                              if unanswered > 0 else {})),
        "throughput": round(ab["throughput"], 1),
        "p50_ms": ab["p50_ms"],
        "p99_ms": ab["p99_ms"],
        # orders that took nothing off the stock (fewer requests than items)
        "lost_updates": max(st["orders"] - (st["initial"] - st["stock"]), 0),
    }
    res["lesson"] = lesson(st, res)
    return res


# ---- reports -------------------------------------------------------------------

def table(res, instances, out):
    cols = ["strategy", "sent", "nginx", "per instance", "bought", "orders",
            "stock",
            "oversold", "errors", "req/s", "p50 ms", "p99 ms"]
    rows = []
    for r in res:
        rows.append([r["name"], r["requests"], r["nginx_logged"],
                     "/".join(str(x) for x in r["per_instance"]),
                     "/".join(str(x) for x in r["purchases_per_instance"]),
                     r["orders"],
                     r["final_stock"], r["oversold"], r["errors"],
                     "%.0f" % r["throughput"], "%g" % r["p50_ms"],
                     "%g" % r["p99_ms"]])
    w = [max(len(str(c)), *(len(str(row[i])) for row in rows))
         for i, c in enumerate(cols)]
    line = "  ".join(str(c).rjust(w[i]) if i else str(c).ljust(w[i])
                     for i, c in enumerate(cols))
    out.write(line + "\n")
    for row in rows:
        out.write("  ".join(str(c).rjust(w[i]) if i else str(c).ljust(w[i])
                            for i, c in enumerate(row)) + "\n")
    out.write("\n")
    for r in res:
        out.write("%-13s %s\n" % (r["name"] + ":", r["lesson"]))


def svg_chart(res, path):
    """Orders and oversold per strategy, as bars."""
    n = max(len(res), 1)
    top = max([r["orders"] for r in res] + [1])
    W, H, L, B = 80 + 90 * n, 320, 60, 260
    esc = lambda s: (str(s).replace("&", "&amp;").replace("<", "&lt;")
                     .replace(">", "&gt;"))
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
         'font-family="sans-serif" font-size="12">' % (W, H),
         '<text x="%d" y="20" font-size="14">orders per strategy '
         '(red: oversold)</text>' % L,
         '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000"/>'
         % (L, B, W - 10, B)]
    for i, r in enumerate(res):
        x = L + 10 + 90 * i
        h = 200.0 * r["orders"] / top
        ok_h = 200.0 * min(r["orders"], r["orders"] - r["oversold"]) / top
        o.append('<rect x="%d" y="%.1f" width="50" height="%.1f" '
                 'fill="#b00"/>' % (x, B - h, h))
        o.append('<rect x="%d" y="%.1f" width="50" height="%.1f" '
                 'fill="#4a4"/>' % (x, B - ok_h, ok_h))
        o.append('<text x="%d" y="%.1f">%d</text>' % (x, B - h - 4,
                                                      r["orders"]))
        o.append('<text x="%d" y="%d" transform="rotate(30 %d %d)">%s'
                 '</text>' % (x, B + 14, x, B + 14, esc(r["name"])))
    o.append("</svg>\n")
    with open(path, "w") as f:
        f.write("\n".join(o))


# ---- --serve: the rig stays up, the page runs the strategies -----------------

class Serve:
    """dlock-rig --serve: redis-server, the instances of one strategy and
    nginx stay up; nginx sends /rig/ to a small control server here and
    everything else (the page, /stock, /deduct_stock) to the instances. A
    POST /rig/run?strategy=a,b from the page queues strategies; each runs in
    turn: fresh instances, nginx switched to them (reload), the old ones
    stopped, the stock reset, ab's load, /stock sampled every 50 ms for the
    page's chart. GET /rig/state: the settings, what runs, the samples of
    the current run and every result so far."""

    SAMPLE_S = 0.05

    def __init__(self, rig, port, out=sys.stdout):
        self.rig, self.port, self.out = rig, port, out
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.queue = []
        self.running = None
        self.phase = "idle"
        self.series = []
        self.results = []
        self.error = None
        self.insts = []
        self.nginx = None
        self.ctrl = None

    # the control server ------------------------------------------------------

    def state(self):
        a = self.rig.args
        with self.lock:
            return {"config": {"instances": a.instances,
                               "requests": a.requests,
                               "concurrency": a.concurrency,
                               "stock": a.stock, "work_ms": a.work_ms,
                               "strategies": a.strategy, "product": PRODUCT,
                               "redis": self.rig.redis.url},
                    "running": self.running, "phase": self.phase,
                    "queue": list(self.queue), "series": list(self.series),
                    "results": list(self.results), "error": self.error}

    def enqueue(self, names):
        known = set(KNOWN_STRATEGIES)
        bad = [n for n in names if n not in known]
        if bad or not names:
            return 400, {"error": "unknown strategy: %s" % ",".join(bad)
                         if bad else "no strategy named"}
        if "redlock" in names and not self.rig.redlock:
            return 400, {"error": "redlock: start the rig with redlock in "
                         "--strategy (it needs three more redis-servers)"}
        with self.lock:
            self.queue += names
            self.wake.notify()
        return 202, {"queued": names}

    def start_control(self):
        serve = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, code, obj):
                body = (json.dumps(obj) + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path.split("?")[0] == "/rig/state":
                    self.answer(200, serve.state())
                else:
                    self.answer(404, {"error": "not found"})

            def do_POST(self):
                u = urllib.parse.urlsplit(self.path)
                if u.path != "/rig/run":
                    return self.answer(404, {"error": "not found"})
                q = urllib.parse.parse_qs(u.query)
                names = [n for v in q.get("strategy", []) for n in v.split(",")
                         if n]
                self.answer(*serve.enqueue(names))

        self.ctrl = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.ctrl.daemon_threads = True
        threading.Thread(target=self.ctrl.serve_forever, daemon=True).start()
        return "127.0.0.1:%d" % self.ctrl.server_address[1]

    # the rig -------------------------------------------------------------------

    def instances(self, name):
        r = self.rig
        insts = []
        try:
            for i in range(r.args.instances):
                insts.append(Stockd(r.procs, r.stockd, r.tmp, i, name, r.redis,
                                    r.redlock, r.stockd_extra))
        except BaseException:
            self.stop_instances(insts, name)
            raise
        r.ports += [s.port for s in insts]
        return insts

    def stop_instances(self, insts, name):
        for s in insts:
            rc = s.stop()
            if rc != 0:
                self.rig.unclean.append("%s %s: exit %s" % (name, s.addr, rc))

    def reset(self):
        code, body = http("POST", "%s/reset?product=%s&stock=%d"
                          % (self.insts[0].url, PRODUCT, self.rig.args.stock))
        if code != 200:
            raise RigError("reset failed: %d %s" % (code, body.strip()))

    def run_one(self, name):
        r, a = self.rig, self.rig.args
        with self.lock:
            self.running, self.phase, self.series = name, "starting", []
        new = self.instances(name)
        old, self.insts = self.insts, new
        try:
            self.nginx.switch(new, name)
        except BaseException:
            self.insts = old
            self.stop_instances(new, name)
            raise
        self.stop_instances(old, name)
        self.reset()
        offset = self.nginx.log_size()
        done = threading.Event()
        t0 = time.monotonic()

        def sample():
            code, body = http("GET", "%s/stock?product=%s"
                              % (new[0].url, PRODUCT), timeout=5)
            if code == 200:
                st = json.loads(body)
                with self.lock:
                    self.series.append([round((time.monotonic() - t0) * 1000),
                                        st["stock"], st["orders"]])

        def sampler():
            while not done.wait(self.SAMPLE_S):
                sample()
        th = threading.Thread(target=sampler, daemon=True)
        with self.lock:
            self.phase = "selling"
        sample()
        th.start()
        try:
            ab = run_ab(r.procs, r.ab, "%s/deduct_stock?product=%s"
                        % (self.nginx.url, PRODUCT), a.requests,
                        a.concurrency, a.ab_timeout)
        finally:
            done.set()
            th.join(10)
        sample()
        code, body = http("GET", "%s/stock?product=%s" % (new[0].url,
                                                          PRODUCT))
        if code != 200:
            raise RigError("reading the stock failed: %d %s"
                           % (code, body.strip()))
        res = measure(a, name, new, ab, json.loads(body),
                      self.nginx.logged(offset))
        with self.lock:
            res["series"] = list(self.series)
            self.results.append(res)
            self.running, self.phase = None, "idle"
        self.out.write("dlock-rig: %s: %d orders, oversold %d, purchases per "
                       "instance %s\n" % (name, res["orders"], res["oversold"],
                                          res["purchases_per_instance"]))
        self.out.flush()

    def run(self):
        r, a = self.rig, self.rig.args
        control = self.start_control()
        self.insts = self.instances(a.strategy[0])
        self.nginx = Nginx(r.procs, r.nginx, r.tmp, "nginx", self.insts,
                           port=self.port, control=control)
        r.ports.append(self.nginx.port)
        self.reset()
        self.out.write("dlock-rig: serving %s/ -- open it in a browser: a "
                       "button per strategy runs it (%d instances behind "
                       "nginx, %d requests at %d). Ctrl-C stops the rig.\n"
                       % (self.nginx.url, a.instances, a.requests,
                          a.concurrency))
        self.out.flush()
        try:
            while True:
                with self.lock:
                    while not self.queue:
                        self.wake.wait(0.5)
                    name = self.queue.pop(0)
                try:
                    self.run_one(name)
                    with self.lock:
                        self.error = None
                except RigError as e:
                    with self.lock:
                        self.error = "%s: %s" % (name, e)
                        self.running, self.phase = None, "idle"
                    sys.stderr.write("dlock-rig: %s: %s\n" % (name, e))
        finally:
            self.ctrl.shutdown()
            self.ctrl.server_close()
            if self.nginx:
                self.nginx.stop()
            self.stop_instances(self.insts, "serve")
            self.insts = []



# ---- the rig ---------------------------------------------------------------------

class Rig:
    def __init__(self, args, on_ready=None, on_done=None):
        self.args = args
        self.on_ready = on_ready
        self.on_done = on_done
        self.procs = Procs()
        self.tmp = None
        self.redis = None
        self.redlock = []
        self.ports = []     # every port a part of the rig listened on
        self.unclean = []   # instances that did not exit 0 on SIGTERM
        here = os.path.dirname(os.path.abspath(__file__))
        self.stockd = find_tool("dlock-stockd", args.stockd, [
            os.path.join(here, "..", "stockd", "dlock-stockd"),
            os.path.join(here, "dlock-stockd")])
        self.nginx = find_tool("nginx", args.nginx)
        self.ab = find_tool("ab", args.ab)
        # a purchase may wait for its lock up to 30 s (ab waits 60 s)
        self.stockd_extra = ["--threads", str(args.threads),
                             "--work-ms", args.work_ms, "--wait-ms", "30000"]

    def __enter__(self):
        self.tmp = tempfile.mkdtemp(prefix="dlock-rig-")
        return self

    def start_servers(self):
        self.redis = Redis(self.procs, self.tmp, "redis")
        if "redlock" in self.args.strategy:
            self.redlock = [Redis(self.procs, self.tmp, "redlock-%d" % i)
                            for i in range(3)]

    def run(self):
        self.start_servers()
        results = []
        for name in self.args.strategy:
            t0 = time.monotonic()
            r = run_strategy(self, name)
            results.append(r)
            if not self.args.json:
                sys.stderr.write("dlock-rig: %s: %d orders, oversold %d in "
                                 "%.1f s\n" % (name, r["orders"],
                                               r["oversold"],
                                               time.monotonic() - t0))
        return results

    def __exit__(self, *exc):
        self.procs.stop_all()
        self.left = [p for p in self.ports if listening(p)]
        keep = self.args.keep_dir or (exc[0] is not None and
                                      exc[0] is not KeyboardInterrupt)
        if self.tmp and not keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        elif self.tmp:
            sys.stderr.write("dlock-rig: logs kept in %s\n" % self.tmp)
        return False


# The release, filled in when the build copies this file (CMake's
# configure_file); run from the source tree it stays as it is.
VERSION = "@DLOCK_RIG_VERSION@"


def parse(argv):
    p = argparse.ArgumentParser(
        prog="dlock-rig",
        description="The articles' rig: redis-server, N dlock-stockd "
        "instances behind nginx, ab as the load, once per strategy.")
    p.add_argument("--version", action="version",
                   version="dlock-rig " + (VERSION if "@" not in VERSION
                                           else "(source tree)"))
    p.add_argument("--instances", type=int, default=2,
                   help="dlock-stockd instances (2)")
    p.add_argument("--requests", type=int, default=1000,
                   help="purchases sent per strategy (1000)")
    p.add_argument("--concurrency", type=int, default=200,
                   help="ab's concurrency (200)")
    p.add_argument("--stock", type=int, default=100,
                   help="the stock before each strategy (100)")
    p.add_argument("--strategy", default=",".join(DEFAULT_STRATEGIES),
                   help="comma-separated (default: %s)"
                   % ",".join(DEFAULT_STRATEGIES))
    p.add_argument("--threads", type=int, default=16,
                   help="request threads per instance (16)")
    p.add_argument("--work-ms", default="0-2",
                   help="business work inside a purchase (0-2)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object on stdout instead of the table")
    p.add_argument("--chart", metavar="FILE.svg", help="orders as an SVG")
    p.add_argument("--serve", action="store_true",
                   help="keep the rig up and serve its page: a button per "
                   "strategy runs it, live (Ctrl-C stops)")
    p.add_argument("--port", type=int, default=0,
                   help="--serve: nginx's port (default: a free one)")
    p.add_argument("--keep-dir", action="store_true",
                   help="keep the temp dir (configs, logs)")
    p.add_argument("--ab-timeout", type=float, default=60.0,
                   help=argparse.SUPPRESS)
    p.add_argument("--stockd", help=argparse.SUPPRESS)
    p.add_argument("--nginx", help=argparse.SUPPRESS)
    p.add_argument("--ab", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.strategy = [s for s in a.strategy.split(",") if s]
    known = KNOWN_STRATEGIES
    for s in a.strategy:
        if s not in known:
            p.error("unknown strategy '%s' (known: %s)" % (s,
                                                           ",".join(known)))
    if not a.strategy:
        p.error("--strategy: no strategy named")
    for name, v, lo, hi in (("--instances", a.instances, 1, 16),
                            ("--requests", a.requests, 1, 1000000),
                            ("--concurrency", a.concurrency, 1, 1000),
                            ("--stock", a.stock, 0, 1000000000),
                            ("--threads", a.threads, 1, 128),
                            ("--port", a.port, 0, 65535)):
        if not lo <= v <= hi:
            p.error("%s must be %d to %d" % (name, lo, hi))
    if a.concurrency > a.requests:
        a.concurrency = a.requests  # ab refuses more
    return a


def serve_main(a):
    """--serve: until Ctrl-C / SIGTERM; 0 after a clean stop."""
    try:
        with Rig(a) as rig:
            rig.start_servers()
            try:
                Serve(rig, a.port).run()
            except KeyboardInterrupt:
                sys.stderr.write("dlock-rig: stopping\n")
    except RigError as e:
        sys.stderr.write("dlock-rig: %s\n" % e)
        return EX_UNAVAILABLE
    except KeyboardInterrupt:
        return 130
    rc = 0
    for u in rig.unclean:
        sys.stderr.write("dlock-rig: dlock-stockd did not stop cleanly: %s\n"
                         % u)
        rc = EX_SOFTWARE
    if rig.left:
        sys.stderr.write("dlock-rig: still listening after the rig: ports %s\n"
                         % rig.left)
        rc = EX_SOFTWARE
    return rc


def _on_signal(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    if a.serve:  # even when started with SIGINT ignored (in the background)
        signal.signal(signal.SIGINT, _on_signal)
    t0 = time.monotonic()
    if a.serve:
        return serve_main(a)
    try:
        with Rig(a) as rig:
            used = rig.run()
    except RigError as e:
        sys.stderr.write("dlock-rig: %s\n" % e)
        return EX_UNAVAILABLE
    except KeyboardInterrupt:
        sys.stderr.write("dlock-rig: interrupted; everything stopped\n")
        return 130
    if a.json:
        json.dump({"instances": a.instances, "strategies": used},
                  sys.stdout)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("dlock-rig: %d instances behind nginx, %d requests "
                         "at concurrency %d per strategy, stock %d\n\n"
                         % (a.instances, a.requests, a.concurrency, a.stock))
        table(used, a.instances, sys.stdout)
        sys.stdout.write("\n%.1f s in all\n" % (time.monotonic() - t0))
    if a.chart:
        svg_chart(used, a.chart)
    rc = 0
    for u in rig.unclean:
        sys.stderr.write("dlock-rig: dlock-stockd did not stop cleanly: %s\n"
                         % u)
        rc = EX_SOFTWARE
    if rig.left:
        sys.stderr.write("dlock-rig: still listening after the rig: ports %s\n"
                         % rig.left)
        rc = EX_SOFTWARE
    return rc


if __name__ == "__main__":
    sys.exit(main())
