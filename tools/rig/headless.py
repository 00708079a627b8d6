"""headless.py -- a small driver for headless Chromium, Python 3 only.

Speaks the DevTools protocol over a pipe (--remote-debugging-pipe: the
browser reads requests from fd 3 and writes answers to fd 4, each a JSON
object ended by a NUL byte), so it needs no port, no websocket library and
no network. Enough for the tests and `make screenshots`: open a page, run
JavaScript in it, wait for a condition, click an element with a real mouse
event, take a screenshot.

    with Browser(width=1200, height=900) as b:
        b.open("http://127.0.0.1:8080/")
        b.wait("document.querySelector('button') !== null", 10)
        b.click("button[data-strategy=dlock]")
        b.screenshot("page.png")

Every call is bounded in time (TimeoutError); the browser runs in its own
process group with a fresh profile directory and is killed on close().
"""

import base64
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--remote-debugging-pipe"]


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Browser:
    def __init__(self, width=1200, height=900, binary=None, timeout=30.0):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise FileNotFoundError("chromium is not installed "
                                    "(scripts/install-deps.sh test)")
        self.width, self.height, self.timeout = width, height, timeout
        self.proc = None
        self.profile = None
        self.buf = b""
        self.mid = 0
        self.session = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def start(self):
        self.profile = tempfile.mkdtemp(prefix="headless-profile-")
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        def child():
            # fds 3 and 4, inheritable (dup2 to a new number clears CLOEXEC)
            a, b = os.dup(to_r), os.dup(from_w)
            os.dup2(a, 3)
            os.dup2(b, 4)
        self.proc = subprocess.Popen(
            [self.binary] + FLAGS +
            ["--user-data-dir=" + self.profile,
             "--window-size=%d,%d" % (self.width, self.height), "about:blank"],
            preexec_fn=child, close_fds=False, start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        end = time.monotonic() + self.timeout
        while True:  # the first tab may come a moment after the browser
            pages = [t for t in self.call("Target.getTargets")["targetInfos"]
                     if t["type"] == "page"]
            if pages or time.monotonic() > end:
                break
            time.sleep(0.1)
        if not pages:
            raise TimeoutError("chromium opened no page")
        page = pages[0]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": page["targetId"],
                                  "flatten": True})["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height,
                   "deviceScaleFactor": 1, "mobile": False}, session=True)

    def close(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for fd in (getattr(self, "to_w", None), getattr(self, "from_r", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.to_w = self.from_r = None
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None

    # ---- the protocol -------------------------------------------------------

    def call(self, method, params=None, session=False, timeout=None):
        self.mid += 1
        msg = {"id": self.mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        end = time.monotonic() + (timeout or self.timeout)
        while True:
            while b"\0" in self.buf:
                raw, _, self.buf = self.buf.partition(b"\0")
                m = json.loads(raw)
                if m.get("id") == self.mid:
                    if "error" in m:
                        raise RuntimeError("%s: %s" % (method, m["error"]))
                    return m.get("result", {})
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium: no answer to %s" % method)
            r, _, _ = select.select([self.from_r], [], [], min(left, 0.5))
            if r:
                d = os.read(self.from_r, 1 << 20)
                if not d:
                    raise RuntimeError("chromium exited")
                self.buf += d

    # ---- what the callers use ------------------------------------------------

    def open(self, url, timeout=None):
        """Navigates and waits (bounded) until the document is complete."""
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait("document.readyState === 'complete' && "
                  "location.href !== 'about:blank'", timeout or self.timeout)

    def js(self, expr):
        """The value of a JavaScript expression (JSON-able), awaited."""
        r = self.call("Runtime.evaluate", {"expression": expr,
                                           "returnByValue": True,
                                           "awaitPromise": True}, session=True)
        if "exceptionDetails" in r:
            raise RuntimeError("js: %s: %s" % (expr[:80], r["exceptionDetails"]
                                               .get("exception", {})
                                               .get("description")))
        return r["result"].get("value")

    def wait(self, expr, timeout, what=None):
        """Polls expr every 50-200 ms until it is truthy; its value, or
        TimeoutError after timeout seconds."""
        end = time.monotonic() + timeout
        delay = 0.05
        while True:
            try:
                v = self.js(expr)
            except RuntimeError:
                v = None
            if v:
                return v
            if time.monotonic() > end:
                raise TimeoutError("waited %.0f s for %s" % (timeout,
                                                             what or expr))
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def click(self, selector):
        """A real left click (mouse events) in the middle of the element."""
        box = self.js("(function(){var e=document.querySelector(%s);"
                      "if(!e)return null;e.scrollIntoView({block:'center'});"
                      "var r=e.getBoundingClientRect();"
                      "return [r.left+r.width/2,r.top+r.height/2];})()"
                      % json.dumps(selector))
        if not box:
            raise RuntimeError("click: no element %s" % selector)
        for t in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent",
                      {"type": t, "x": box[0], "y": box[1], "button": "left",
                       "clickCount": 1}, session=True)

    def screenshot(self, path, full_page=True):
        """A PNG of the page (the whole document with full_page)."""
        params = {"format": "png"}
        if full_page:
            size = self.js("[Math.ceil(document.documentElement.scrollWidth),"
                           "Math.ceil(document.documentElement.scrollHeight)]")
            params["clip"] = {"x": 0, "y": 0, "width": max(size[0], 1),
                              "height": max(size[1], 1), "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", params, session=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data["data"]))
