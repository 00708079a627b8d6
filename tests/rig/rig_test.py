#!/usr/bin/env python3
"""Tests of dlock-stockd and dlock-rig (issue 16), one ctest case each:

  rig_test.py CASE --rig BUILD/tools/rig/dlock-rig --stockd PATH

Real parts only: a private redis-server, dlock-stockd on free loopback
ports, nginx and ab (the rig), headless Chromium (the page). Every process
is started by the rig module's Procs (own process group, dies with us)
and stopped however the case ends. Exit 0 pass, 1 fail, 77 skip (a part
that is not installed: the message says which).
"""

import argparse
import glob
import importlib.machinery
import importlib.util
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

SKIP = 77


def load_rig(path):
    return load_module(path, "dlock_rig")


def load_module(path, name):
    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def skip(msg):
    print("SKIP: " + msg)
    sys.exit(SKIP)


# ---- dlock-stockd alone --------------------------------------------------

class One:
    """A redis-server and one dlock-stockd, stopped on exit."""

    def __init__(self, R, stockd, tmp, extra=()):
        self.R = R
        self.procs = R.Procs()
        self.redis = R.Redis(self.procs, tmp, "redis")
        self.s = R.Stockd(self.procs, stockd, tmp, 0, "dlock", self.redis,
                          [], ["--products", "sku1,sku2", "--threads", "4"] +
                          list(extra))
        self.url = self.s.url

    def req(self, method, path):
        return self.R.http(method, self.url + path)

    def raw(self, data, wait=8.0):
        """Sends raw bytes; returns what came back until the server closed
        (or wait seconds)."""
        s = socket.create_connection(("127.0.0.1", self.s.port), timeout=wait)
        out = b""
        try:
            s.sendall(data)
            end = time.monotonic() + wait
            while time.monotonic() < end:
                d = s.recv(65536)
                if not d:
                    break
                out += d
                if b"\r\n\r\n" in out and b"Connection: close" not in out \
                        and self._complete(out):
                    break
        except OSError:
            pass
        finally:
            s.close()
        return out.decode(errors="replace")

    @staticmethod
    def _complete(out):
        head, _, body = out.partition(b"\r\n\r\n")
        m = re.search(rb"Content-Length: (\d+)", head)
        return m and len(body) >= int(m.group(1))

    def alive(self):
        check(self.s.proc.poll() is None, "dlock-stockd died")
        code, body = self.req("GET", "/healthz")
        check(code == 200 and body.startswith("ok "), "healthz: %d %r"
              % (code, body))

    def close(self):
        rc = self.s.stop()
        self.procs.stop_all()
        return rc


def status(resp):
    m = re.match(r"HTTP/1\.[01] (\d{3})", resp)
    return int(m.group(1)) if m else 0


def metric(text, name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def case_stockd_endpoints(R, a, tmp):
    one = One(R, a.stockd, tmp)
    try:
        one.alive()
        code, body = one.req("POST", "/reset?product=sku1&stock=2")
        check(code == 200 and json.loads(body)["stock"] == 2, "reset: %d %s"
              % (code, body))
        st = json.loads(one.req("GET", "/stock?product=sku1")[1])
        check((st["stock"], st["orders"], st["initial"], st["oversold"]) ==
              (2, 0, 2, 0), "stock after reset: %s" % st)
        check(st["strategy"] == "dlock" and st["instance"] == one.s.addr,
              "stock names: %s" % st)
        outs = [one.req("POST", "/deduct_stock?product=sku1&user=u%d" % i)
                for i in range(3)]
        check([c for c, _ in outs] == [200, 200, 409], "deduct: %s" % outs)
        check(json.loads(outs[0][1])["result"] == "order" and
              json.loads(outs[2][1])["result"] == "soldout", str(outs))
        # one user, two purchases: the second is refused
        one.req("POST", "/reset?product=sku1&stock=5")
        c1, _ = one.req("POST", "/deduct_stock?product=sku1&user=alice")
        c2, b2 = one.req("POST", "/deduct_stock?product=sku1&user=alice")
        check((c1, c2) == (200, 409) and "duplicate" in b2,
              "duplicate user: %d %d %s" % (c1, c2, b2))
        st = json.loads(one.req("GET", "/stock?product=sku1")[1])
        check((st["stock"], st["orders"]) == (4, 1), "stock: %s" % st)
        # purchases per instance count orders, not requests (issue 29)
        check(st["per_instance"] == {one.s.addr: 1} and
              st["requests_per_instance"] == {one.s.addr: 2},
              "per_instance: %s" % st)
        # a correct strategy with nothing oversold: no alarm (issue 29)
        check(st["oversold"] == 0 and st["verdict"] == "ok" and
              st["lesson"] is None, "a false alarm: %s" % st)
        # the other product is separate
        st2 = json.loads(one.req("GET", "/stock?product=sku2")[1])
        check(st2["orders"] == 0, "sku2: %s" % st2)
        code, text = one.req("GET", "/metrics")
        check(code == 200, "metrics: %d" % code)
        check(metric(text, "stockd_orders_total") == 3,
              "orders_total:\n" + text)
        check(metric(text, 'stockd_rejections_total{reason="soldout"}') == 1
              and metric(text,
                         'stockd_rejections_total{reason="duplicate"}') == 1,
              "rejections:\n" + text)
        check(metric(text, "stockd_lock_wait_seconds_count") == 5 and
              metric(text, 'stockd_lock_wait_seconds_bucket{le="+Inf"}') == 5,
              "histogram:\n" + text)
        check(metric(text, 'stockd_requests_total{endpoint="deduct_stock",'
                     'code="2xx"}') == 3, "requests:\n" + text)
        code, page = one.req("GET", "/")
        check(code == 200 and 'id="stock"' in page and "sku1" in page and
              "<script" in page and "http" not in page.replace(
                  "http-equiv", ""), "page: %d" % code)
        # its script and style come from the service itself (issue 29)
        for asset, kind in (("/page.js", "fetch("), ("/page.css", "body{")):
            code, text = one.req("GET", asset)
            check(code == 200 and kind in text, "%s: %d" % (asset, code))
    finally:
        rc = one.close()
    check(rc == 0, "dlock-stockd exited %s on SIGTERM" % rc)


def case_stockd_malformed(R, a, tmp):
    one = One(R, a.stockd, tmp, ["--max-body", "1024"])
    try:
        cases = [
            ("POST", "/reset?product=sku1&stock=abc", 400, "not a number"),
            ("POST", "/reset?product=sku1&stock=-5", 400, "out of range"),
            ("POST", "/reset?product=sku1&stock=99999999999999999999", 400,
             ""),
            ("POST", "/reset?product=sku1&stock=", 400, ""),
            ("POST", "/reset?product=sku1", 400, "missing parameter 'stock'"),
            ("POST", "/reset?stock=3", 400, "missing parameter 'product'"),
            ("GET", "/stock", 400, "missing parameter 'product'"),
            ("GET", "/stock?product=nope", 404, "unknown product"),
            ("POST", "/deduct_stock?product=nope", 404, "unknown product"),
            ("POST", "/deduct_stock?product=%3Cb%3E", 400, "not a product"),
            ("POST", "/deduct_stock?product=sku1&user=a%20b", 400, "user"),
            ("POST", "/deduct_stock?product=sku1&user=" + "x" * 100, 400,
             "user"),
            ("GET", "/deduct_stock?product=sku1", 405, "use POST"),
            ("POST", "/stock?product=sku1", 405, "use GET"),
            ("GET", "/nothing/here", 404, "not found"),
            ("GET", "/stock?product=%zz", 400, ""),
        ]
        for method, path, want, text in cases:
            code, body = one.req(method, path)
            check(code == want and text in body and body.endswith("\n") and
                  body.count("\n") == 1,
                  "%s %s: want %d %r, got %d %r" % (method, path, want, text,
                                                    code, body))
        raws = [
            (b"POST /deduct_stock?product=sku1 HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: 100000\r\n\r\n" + b"a" * 2000, 413),
            (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"h" * 20000 +
             b"\r\n\r\n", 400),
            (b"GARBAGE\r\n\r\n", 400),
            (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 400),
            (b"POST /deduct_stock?product=sku1 HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: -1\r\n\r\n", 400),
        ]
        for data, want in raws:
            resp = one.raw(data)
            check(400 <= status(resp) < 500 and status(resp) == want,
                  "raw %r...: want %d, got %r" % (data[:40], want,
                                                  resp[:120]))
        one.alive()
        check(one.req("GET", "/stock?product=sku1")[0] == 200, "stock after")
    finally:
        rc = one.close()
    check(rc == 0, "dlock-stockd exited %s on SIGTERM" % rc)


def case_stockd_slow_clients(R, a, tmp):
    one = One(R, a.stockd, tmp, ["--client-timeout", "1"])
    try:
        one.req("POST", "/reset?product=sku1&stock=3")
        slow = [
            # the headers never end
            b"POST /deduct_stock?product=sku1 HTTP/1.1\r\nHost: x\r\n",
            # the body never comes
            b"POST /deduct_stock?product=sku1 HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: 10\r\n\r\nab",
            # half a request line
            b"GET /sto",
        ]
        for data in slow:
            t0 = time.monotonic()
            resp = one.raw(data, wait=8.0)
            dt = time.monotonic() - t0
            check(status(resp) == 408 and "too slow" in resp,
                  "slow %r: got %r" % (data[:30], resp[:120]))
            check(0.8 <= dt < 6.0, "slow %r: answered after %.1f s"
                  % (data[:30], dt))
        # a request trickled byte by byte past the deadline: 408 too (the
        # client reads between bytes, as a real one would)
        s = socket.create_connection(("127.0.0.1", one.s.port), timeout=8)
        out = b""
        try:
            for ch in b"GET /healthz HTTP/1.1\r\nHost: x\r\n" * 4:
                s.sendall(bytes([ch]))
                s.settimeout(0.05)
                try:
                    out += s.recv(4096)
                except socket.timeout:
                    continue
                break
            s.settimeout(5)
            while True:
                d = s.recv(4096)
                if not d:
                    break
                out += d
        except OSError:
            pass
        finally:
            s.close()
        check(status(out.decode(errors="replace")) == 408,
              "trickle: got %r" % out[:120])
        # nothing was bought by the slow ones, and the service is fine
        st = json.loads(one.req("GET", "/stock?product=sku1")[1])
        check(st["orders"] == 0 and st["stock"] == 3, "stock: %s" % st)
        one.alive()
        code, text = one.req("GET", "/metrics")
        check(metric(text, 'stockd_requests_total{endpoint="other",'
                     'code="4xx"}') >= 4, "408s counted:\n" + text)
    finally:
        rc = one.close()
    check(rc == 0, "dlock-stockd exited %s on SIGTERM" % rc)


# ---- the rig ------------------------------------------------------------------

def leftovers(root):
    """Processes whose cwd is under root (the rig's parts run there)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cwd = os.readlink("/proc/%s/cwd" % pid)
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd.startswith(root):
            found.append("%s %s" % (pid, cmd.strip()))
    return found


def need_parts(R):
    for tool in ("nginx", "ab", "redis-server"):
        try:
            R.find_tool(tool, None)
        except R.RigError as e:
            skip(str(e))


def case_rig_access_log(R, a, tmp):
    """The rig's reading of nginx's access log: a request nginx passed to a
    second upstream after an error lists both ("a, b"; "a : b" across an
    internal redirect) and counts for the last; a failed request's status
    is counted by status in error_statuses and named in the lesson, so a
    run with errors says which (rig.rig_serve_clicks once failed with 32
    errors nobody could name, and its retried requests were counted for no
    instance)."""
    from types import SimpleNamespace as NS
    A, B = "127.0.0.1:5001", "127.0.0.1:5002"
    req = ' "POST /deduct_stock?product=p HTTP/1.0"'
    lines = ["200 %s 0.004%s" % (A, req),
             "409 %s, %s 0.010%s" % (A, B, req),
             "502 %s, %s 0.020%s" % (B, A, req),
             "200 %s : %s 0.003%s" % (A, B, req),
             "500 - 0.000%s" % req]
    got = [R.parse_access(l) for l in lines]
    want = [("200", A), ("409", B), ("502", A), ("200", B), ("500", "-")]
    check(got == want, "parsed %s, want %s" % (got, want))
    log = os.path.join(tmp, "access.log")
    with open(log, "w") as f:
        f.write("200 %s 0.001 \"GET /stock HTTP/1.0\"\n" % A)
        f.write("\n".join(lines) + "\n")
    ng = R.Nginx.__new__(R.Nginx)
    ng.access = log
    logged = ng.logged()
    check(logged == want, "logged %s" % logged)
    insts = [NS(addr=A), NS(addr=B)]
    args = NS(requests=6)
    ab = {"complete": 5, "throughput": 1.0, "p50_ms": 1, "p99_ms": 2}
    st = {"orders": 2, "stock": 0, "initial": 2, "oversold": 0,
          "per_instance": {A: 1, B: 1}}
    res = R.measure(args, "dlock", insts, ab, st, logged)
    check(res["per_instance"] == [2, 2], "per instance %s" %
          res["per_instance"])
    check(res["errors"] == 3 and res["error_statuses"] ==
          {"502": 1, "500": 1, "unanswered": 1},
          "errors %s %s" % (res["errors"], res["error_statuses"]))
    check("1 502" in res["lesson"] and "1 500" in res["lesson"] and
          "1 unanswered" in res["lesson"], "lesson %r" % res["lesson"])


def case_rig_switch_waits_for_old_workers(R, a, tmp):
    """Nginx.switch (--serve moving the traffic to the next strategy's
    instances) returns only when every nginx worker of the old
    configuration has exited: until then an old worker may still accept a
    connection and pass it to the old instances, which the rig stops next
    (rig.rig_serve_clicks failed under load with 32 such requests refused,
    502s). A request whose body is half sent keeps the old worker busy:
    switch must wait for it, and return once it is answered."""
    need_parts(R)
    import http.server
    import threading

    def fake(strategy):
        """An instance as the rig sees it: /healthz says "ok <addr>
        <strategy>", anything else 200."""
        class H(http.server.BaseHTTPRequestHandler):
            def reply(self, body):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self.reply(("ok %s %s\n" % (srv.addr, strategy)).encode())

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.reply(b"bought\n")

            def log_message(self, *args):
                pass
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        srv.addr = "127.0.0.1:%d" % srv.server_address[1]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv

    old, new = fake("old"), fake("new")
    procs = R.Procs()
    held = None
    try:
        ng = R.Nginx(procs, R.find_tool("nginx", None), tmp, "nginx", [old])
        master = ng.proc.pid
        R.poll(lambda: R.children(master), 10, "nginx's worker")
        workers = R.children(master)
        # a request in progress on the old worker: headers and 3 of 100
        # bytes of body (nginx reads the whole body before it proxies)
        held = socket.create_connection(("127.0.0.1", ng.port), timeout=10)
        held.sendall(b"POST /deduct_stock HTTP/1.0\r\nHost: rig\r\n"
                     b"Content-Length: 100\r\n\r\nabc")
        done = []

        def run():
            try:
                ng.switch([new], "new", timeout=60)
                done.append(("ok", time.monotonic()))
            except Exception as e:  # reported below
                done.append((repr(e), time.monotonic()))
        t = threading.Thread(target=run, daemon=True)
        t.start()

        def routed_new():
            code, body = R.http("GET", ng.url + "/healthz", timeout=5)
            return code == 200 and body.split()[2:3] == ["new"]
        R.poll(routed_new, 30, "nginx routing to the new instance")
        time.sleep(1.0)  # switch, had it returned here, would have by now
        check(not done, "switch returned while an old worker still served "
              "a request: %s" % done)
        check(workers & R.children(master), "the old worker is gone, yet "
              "it holds a request")
        held.sendall(b"x" * 97)
        answer = held.recv(4096)
        check(answer.startswith(b"HTTP/1.1 200"), "the held request: %r"
              % answer[:200])
        t.join(30)
        check(done and done[0][0] == "ok", "switch did not return after "
              "the old worker's request ended: %s" % done)
        check(not (workers & R.children(master)),
              "switch returned, an old worker is still there")
    finally:
        if held:
            held.close()
        procs.stop_all()
        old.shutdown()
        new.shutdown()


def case_rig_quick(R, a, tmp):
    need_parts(R)
    env = dict(os.environ, TMPDIR=tmp)
    t0 = time.monotonic()
    p = subprocess.run([a.rig, "--stockd", a.stockd, "--json", "--requests", "300",
                        "--concurrency", "200", "--strategy",
                        "none,dlock,atomic"], cwd=tmp, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=100)
    dt = time.monotonic() - t0
    err = p.stderr.decode(errors="replace")
    check(p.returncode == 0, "dlock-rig exited %d: %s" % (p.returncode, err))
    out = json.loads(p.stdout.decode())
    print(json.dumps(out, indent=1))
    check(out["instances"] == 2, "instances: %s" % out["instances"])
    byname = {s["name"]: s for s in out["strategies"]}
    check(sorted(byname) == ["atomic", "dlock", "none"], str(byname.keys()))
    for s in out["strategies"]:
        for k in ("name", "requests", "nginx_logged", "per_instance", "orders",
                  "final_stock", "oversold", "errors", "throughput", "p50_ms",
                  "p99_ms"):
            check(k in s, "%s: no %s" % (s.get("name"), k))
        check(s["requests"] == 300 and s["nginx_logged"] == 300,
              "%s: nginx logged %s of %s" % (s["name"], s["nginx_logged"],
                                             s["requests"]))
        check(len(s["per_instance"]) == 2 and min(s["per_instance"]) > 0 and
              sum(s["per_instance"]) == 300,
              "%s: per instance %s" % (s["name"], s["per_instance"]))
        check(s["errors"] == 0, "%s: %d errors" % (s["name"], s["errors"]))
        check(s["throughput"] > 0 and s["p99_ms"] >= s["p50_ms"],
              "%s: figures %s" % (s["name"], s))
    check(byname["none"]["oversold"] > 0, "none did not oversell: %s"
          % byname["none"])
    for n in ("dlock", "atomic"):
        s = byname[n]
        check(s["oversold"] == 0 and s["orders"] == 100 and
              s["final_stock"] == 0, "%s: %s" % (n, s))
    left = leftovers(tmp)
    check(not left, "processes left behind: %s" % left)
    check(dt < 60, "took %.1f s" % dt)


def case_rig_interrupted(R, a, tmp):
    """Ctrl-C in the middle of a run: everything stops, nothing is left."""
    need_parts(R)
    env = dict(os.environ, TMPDIR=tmp)
    p = subprocess.Popen([a.rig, "--stockd", a.stockd, "--requests", "2000", "--concurrency", "50",
                          "--strategy", "none,setnx-expire,dlock"], cwd=tmp,
                         env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    # wait (bounded) until the first strategy is done and the second runs
    end = time.monotonic() + 60
    err = b""
    while time.monotonic() < end and b"dlock-rig: none:" not in err:
        r = p.stderr.read1(4096) if p.poll() is None else b""
        if not r and p.poll() is not None:
            break
        err += r
    check(b"dlock-rig: none:" in err, "the rig never got going: %r" % err)
    time.sleep(0.5)  # into the second strategy's load (not a sync point)
    os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C sends: the whole group
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise Fail("the rig did not stop within 30 s of SIGINT")
    err += p.stderr.read()
    check(p.returncode == 130 and b"interrupted" in err,
          "exit %s: %r" % (p.returncode, err[-300:]))
    left = leftovers(tmp)
    check(not left, "processes left behind: %s" % left)
    check(not [d for d in os.listdir(tmp) if d.startswith("dlock-rig-")],
          "temp dir left: %s" % os.listdir(tmp))


def redis_numbers(sock):
    """The product's numbers straight from Redis (redis-cli on the rig's
    private socket)."""
    def cli(*args):
        p = subprocess.run(["redis-cli", "-s", sock] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=10)
        check(p.returncode == 0, "redis-cli %s: %s" % (args, p.stderr))
        return p.stdout.decode().split()
    k = "stockd:sku1:"
    stock, orders, initial = (int(cli("GET", k + x)[0] or 0)
                              for x in ("stock", "orders", "initial"))
    h = cli("HGETALL", k + "served")
    served = {h[i]: int(h[i + 1]) for i in range(0, len(h) - 1, 2)}
    return {"stock": stock, "orders": orders, "initial": initial,
            "oversold": max(orders - initial, 0) + max(-stock, 0),
            "lost": max(orders - (initial - stock), 0), "purchases": served}


PAGE_NUMBERS = r"""
(function(){
  function n(id){return parseInt(document.getElementById(id).textContent,10);}
  var per = {};
  document.querySelectorAll('#instances tr[data-instance]').forEach(function(tr){
    per[tr.getAttribute('data-instance')] =
      parseInt(tr.querySelector('td.purchases').textContent, 10);});
  return {strategy: document.getElementById('strategy').textContent,
          stock: n('stock'), orders: n('orders'), initial: n('initial'),
          oversold: n('oversold'), lost: n('lost'), purchases: per,
          oversold_class: document.getElementById('oversold').className,
          verdict: document.getElementById('verdict').textContent,
          lesson: document.getElementById('lesson').textContent};
})()
"""

CARD = r"""
(function(name){
  var c = document.querySelector('#cards .card[data-strategy="' + name + '"]');
  if (!c) return null;
  var out = {badge: c.querySelector('.badge').textContent,
             lesson: c.querySelector('.card-lesson').textContent};
  c.querySelectorAll('dd[data-k]').forEach(function(d){
    out[d.getAttribute('data-k')] = d.textContent;});
  return out;
})(%s)
"""


def first_line(p, timeout):
    buf = b""
    end = time.monotonic() + timeout
    while b"\n" not in buf and time.monotonic() < end:
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            d = os.read(p.stdout.fileno(), 4096)
            if not d:
                break
            buf += d
    return buf.decode(errors="replace")


def case_rig_serve_clicks(R, a, tmp):
    """dlock-rig --serve in headless Chromium: a click on "none", then on
    "dlock"; after each run the page's numbers equal Redis's, purchases per
    instance are the orders each instance made, oversold is red for none,
    no alarm for dlock; both cards side by side; SIGINT stops everything."""
    need_parts(R)
    H = load_module(a.headless, "headless")
    if not H.find_chromium():
        skip("chromium is not installed (scripts/install-deps.sh test): the "
             "page was not checked in a browser")
    env = dict(os.environ, TMPDIR=tmp)
    err = open(os.path.join(tmp, "rig.err"), "wb")
    # --keep-dir: the instances' logs stay in tmp (kept on a failure) --
    # the page's "errors: see the instances' logs" needs them
    p = subprocess.Popen([a.rig, "--stockd", a.stockd, "--serve",
                          "--keep-dir",
                          "--requests", "300", "--concurrency", "100",
                          "--strategy", "none,dlock"], cwd=tmp, env=env,
                         stdout=subprocess.PIPE, stderr=err,
                         start_new_session=True)
    b = None
    try:
        line = first_line(p, 60)
        m = re.search(r"serving (http://127\.0\.0\.1:\d+)/", line)
        check(m, "no URL printed: %r" % line)
        url = m.group(1)
        code, body = R.http("GET", url + "/rig/state")
        check(code == 200, "rig/state: %d %s" % (code, body))
        sock = json.loads(body)["config"]["redis"][len("unix://"):]
        b = H.Browser(width=1200, height=900)
        b.start()
        b.open(url + "/")
        b.wait("document.querySelector('#buttons button[data-strategy=\"dlock\"]') !== null",
               20, "the strategy buttons")
        after = {}
        for name in ("none", "dlock"):
            b.click('#buttons button[data-strategy="%s"]' % name)
            b.wait("document.querySelector('#cards .card[data-strategy=\"%s\"]') !== null"
                   " && document.getElementById('lesson').getAttribute("
                   "'data-done') === '%s'" % (name, name), 90,
                   "the end of %s's run on the page" % name)
            want = redis_numbers(sock)
            after[name] = want
            end = time.monotonic() + 10
            while True:  # the page refreshes every second: bounded wait
                got = b.js(PAGE_NUMBERS)
                same = all(got[k] == want[k] for k in want)
                if same or time.monotonic() > end:
                    break
                time.sleep(0.2)
            print("%s: page %s\n%s redis %s" % (name, got, " " * len(name),
                                                 want))
            check(got["strategy"] == name, "the page shows %s" % got)
            for k in want:
                check(got[k] == want[k], "%s: the page says %s = %s, Redis %s"
                      % (name, k, got[k], want[k]))
            check(sum(want["purchases"].values()) == want["orders"] and
                  len(want["purchases"]) == 2,
                  "%s: purchases per instance %s, orders %d"
                  % (name, want["purchases"], want["orders"]))
            check("please report" not in got["lesson"] and
                  "overlapped" not in got["lesson"],
                  "%s: a false alarm: %r" % (name, got["lesson"]))
        none, dl = after["none"], after["dlock"]
        check(none["oversold"] > 0, "none did not oversell: %s" % none)
        check(dl["oversold"] == 0 and dl["orders"] == 100 and
              dl["stock"] == 0, "dlock: %s" % dl)
        got = b.js(PAGE_NUMBERS)
        check(got["verdict"] == "correct" and "Correct" in got["lesson"] and
              "bad" not in got["oversold_class"], "dlock's verdict: %s" % got)
        for name in ("none", "dlock"):
            card = b.js(CARD % json.dumps(name))
            w = after[name]
            check(card and card["orders"] == str(w["orders"]) and
                  card["oversold"] == str(w["oversold"]) and
                  card["stock left"] == str(w["stock"]),
                  "card %s: %s, Redis after its run: %s" % (name, card, w))
            bought = card["purchases per instance"].split(" / ")
            check(sorted(int(x) for x in bought) ==
                  sorted(w["purchases"].values()),
                  "card %s: purchases %s, Redis %s" % (name, bought,
                                                        w["purchases"]))
            check("please report" not in card["lesson"],
                  "card %s: false alarm %r" % (name, card["lesson"]))
        check(b.js(CARD % '"none"')["badge"] == "oversold" and
              b.js(CARD % '"dlock"')["badge"] == "correct", "the badges")
        # the oversold number of none was red on the page while it showed
        check(b.js("document.querySelector('#cards .card[data-strategy=\"none\"]"
                   " dd[data-k=\"oversold\"]').className") == "bad",
              "none's oversold is not red")
    except BaseException:
        if b:
            try:
                shot = os.path.join(tmp, "page.png")
                b.screenshot(shot)
                print("screenshot: %s" % shot)
            except Exception as e:
                print("no screenshot: %s" % e)
        rig_dir = os.path.join(tmp, "dlock-rig-*")
        for log in sorted(glob.glob(os.path.join(rig_dir, "stockd-*.log")) +
                          glob.glob(os.path.join(rig_dir, "*", "error.log"))):
            with open(log, errors="replace") as f:
                tail = f.read()[-3000:]
            print("----- %s (tail) -----\n%s" % (log, tail))
        raise
    finally:
        if b:
            b.close()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
        try:
            rc = p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "hung"
        err.close()
    with open(os.path.join(tmp, "rig.err")) as f:
        text = f.read()
    check(rc == 0, "dlock-rig --serve exited %s on SIGINT: %s" % (rc, text))
    left = leftovers(tmp)
    check(not left, "processes left behind: %s" % left)

def prometheus_parser():
    """A function text -> {family: [(sample name, labels, value)]}, by
    python3-prometheus-client's text parser: in this interpreter, or in
    Debian's /usr/bin/python3 when this one lacks it (a pyenv first on
    PATH). Skips the case when neither has it."""
    prog = ("import json, sys\n"
            "from prometheus_client.parser import "
            "text_string_to_metric_families as p\n"
            "print(json.dumps({f.name: [(s.name, s.labels, s.value) for s in "
            "f.samples] for f in p(sys.stdin.read())}))\n")
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run(
                [py, "-c", "import prometheus_client"],
                stderr=subprocess.DEVNULL).returncode == 0:
            def parse(text, py=py):
                r = subprocess.run([py, "-c", prog], input=text,
                                   capture_output=True, text=True)
                check(r.returncode == 0, "not Prometheus text (%s):\n%s"
                      % (r.stderr.strip().splitlines()[-1:], text))
                return json.loads(r.stdout)
            return parse
    skip("python3-prometheus-client is not installed "
         "(scripts/install-deps.sh test)")


def case_stockd_health(R, a, tmp):
    """/healthz is 503 within 2 s of Redis stopping (SIGSTOP, then kill)
    and 200 again once it answers; /metrics carries the library's counters
    and parses as Prometheus text; log lines carry a timestamp and the
    lock name (issue 27)."""
    parse = prometheus_parser()
    one = One(R, a.stockd, tmp)
    try:
        one.alive()
        one.req("POST", "/reset?product=sku1&stock=3")
        code, _ = one.req("POST", "/deduct_stock?product=sku1&user=u1")
        check(code == 200, "deduct: %d" % code)
        code, text = one.req("GET", "/metrics")
        check(code == 200, "metrics: %d" % code)
        fams = parse(text)
        for name in ("stockd_dlock_lost_holds", "stockd_dlock_renewals",
                     "stockd_dlock_connected", "stockd_redis_up",
                     "stockd_dlock_acquired", "stockd_dlock_reconnects"):
            check(name in fams, "metrics lack %s:\n%s" % (name, text))
        reasons = {s[1].get("reason") for s in
                   fams["stockd_dlock_lost_holds"]}
        check(reasons == {"key_gone", "unreachable", "thread_exit", "forced"},
              "lost-hold reasons: %s" % reasons)
        pid = one.redis.proc.pid

        def until(code, limit):
            t0 = time.monotonic()
            while time.monotonic() - t0 < limit:
                c, body = one.req("GET", "/healthz")
                if c == code:
                    return time.monotonic() - t0, body
                time.sleep(0.05)
            raise Fail("/healthz not %d within %.1f s" % (code, limit))

        os.kill(pid, signal.SIGSTOP)
        try:
            took, body = until(503, 6)
            print("503 %.2f s after SIGSTOP" % took)
            check(took <= 2.0, "503 came %.2f s after SIGSTOP" % took)
            check("Redis does not answer" in body, "503 body: %r" % body)
        finally:
            os.kill(pid, signal.SIGCONT)
        until(200, 6)
        code, text = one.req("GET", "/metrics")
        check(metric(text, "stockd_redis_up") == 1, "redis_up:\n" + text)
        one.redis.proc.kill()
        one.redis.proc.wait()
        took, _ = until(503, 6)
        print("503 %.2f s after kill" % took)
        check(took <= 2.0, "503 came %.2f s after kill" % took)
        code, text = one.req("GET", "/metrics")
        check(metric(text, "stockd_redis_up") == 0, "redis_up:\n" + text)
    finally:
        one.close()
    log = open(one.s.log).read()
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z dlock-stockd\["
    check(re.search(stamp + r".* lock=-: Redis unreachable", log),
          "no timestamped 'Redis unreachable' line:\n" + log)
    check(re.search(stamp + r".* lock=-: Redis reachable again", log),
          "no 'reachable again' line:\n" + log)


def case_stockd_lock_lost(R, a, tmp):
    """A hold the service loses (its key deleted under a purchase) reaches
    cfg.on_lock_lost: a timestamped log line naming the lock, and the
    callbacks counter of /metrics (issue 27)."""
    import threading
    one = One(R, a.stockd, tmp, ["--work-ms", "4000-4000",
                                 "--watchdog-ms", "600"])
    lock = "stockd:sku1:lock"
    try:
        one.alive()
        one.req("POST", "/reset?product=sku1&stock=3")
        out = []
        t = threading.Thread(target=lambda: out.append(
            one.req("POST", "/deduct_stock?product=sku1&user=u1")))
        t.start()
        sock = one.redis.sock

        def redis(*args):
            return subprocess.run(["redis-cli", "-s", sock] + list(args),
                                  capture_output=True, text=True).stdout
        t0 = time.monotonic()
        while redis("exists", lock).strip() != "1":
            check(time.monotonic() - t0 < 5, "the purchase never held "
                  + lock)
            time.sleep(0.02)
        redis("del", lock)
        t.join(30)
        check(not t.is_alive(), "the purchase did not end")
        code, text = one.req("GET", "/metrics")
        check(metric(text, "stockd_dlock_lock_lost_callbacks_total") == 1,
              "lost callbacks:\n" + text)
    finally:
        one.close()
    log = open(one.s.log).read()
    check(re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
                    r"dlock-stockd\[[^]]*\] lock=%s: hold LOST"
                    % re.escape(lock), log, re.M),
          "no timestamped loss line naming the lock:\n" + log)


CASES = {
    "stockd_endpoints": case_stockd_endpoints,
    "stockd_malformed": case_stockd_malformed,
    "stockd_slow_clients": case_stockd_slow_clients,
    "stockd_health": case_stockd_health,
    "stockd_lock_lost": case_stockd_lock_lost,
    "rig_access_log": case_rig_access_log,
    "rig_switch_waits_for_old_workers": case_rig_switch_waits_for_old_workers,
    "rig_quick": case_rig_quick,
    "rig_interrupted": case_rig_interrupted,
    "rig_serve_clicks": case_rig_serve_clicks,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("--rig", required=True)
    p.add_argument("--stockd", required=True)
    p.add_argument("--headless", help="tools/rig/headless.py")
    a = p.parse_args()
    R = load_rig(a.rig)
    tmp = tempfile.mkdtemp(prefix="rig-test-")
    ok = False
    try:
        CASES[a.case](R, a, tmp)
        ok = True
    except Fail as e:
        print("FAIL: %s" % e)
    except R.RigError as e:
        print("FAIL: the rig: %s" % e)
    finally:
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("files kept in %s" % tmp)
    if ok:
        print("PASS: " + a.case)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
