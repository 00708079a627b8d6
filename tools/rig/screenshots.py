#!/usr/bin/env python3
"""screenshots.py -- the README's pictures, made from real runs (make
screenshots), so they stay true:

  OUT/seckill-chart.png  the chart of `make demo` (dlock-seckill --strategy
                         all --scenarios all --chart), rendered in headless
                         Chromium;
  OUT/rig-page.png       the page of `dlock-rig --serve` after every default
                         strategy ran (started from the page: ?run=...).

  screenshots.py --seckill BIN --rig BIN [--out DIR] [--svg FILE]
"""

import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import headless  # noqa: E402


def chart(seckill, svg, png):
    subprocess.run([seckill, "--strategy", "all", "--scenarios", "all",
                    "--chart", svg], check=True, timeout=600)
    with open(svg) as f:
        head = f.read(400)
    w = int(re.search(r'width="(\d+)"', head).group(1))
    h = int(re.search(r'height="(\d+)"', head).group(1))
    with headless.Browser(width=w, height=h) as b:
        b.open("file://" + os.path.abspath(svg))
        b.screenshot(png, full_page=False)
    print("screenshots: %s (%dx%d)" % (png, w, h))


def rig_page(rig, png):
    p = subprocess.Popen([rig, "--serve"], stdout=subprocess.PIPE,
                         start_new_session=True)
    try:
        buf = b""
        end = time.monotonic() + 60
        while b"\n" not in buf and time.monotonic() < end:
            if select.select([p.stdout], [], [], 0.5)[0]:
                d = os.read(p.stdout.fileno(), 4096)
                if not d:
                    break
                buf += d
        m = re.search(rb"serving (http://[0-9.:]+)/", buf)
        if not m:
            raise SystemExit("dlock-rig --serve printed no URL: %r" % buf)
        url = m.group(1).decode()
        import urllib.request
        with urllib.request.urlopen(url + "/rig/state", timeout=10) as r:
            names = json.load(r)["config"]["strategies"]
        with headless.Browser(width=1280, height=900) as b:
            b.open(url + "/?run=" + ",".join(names))
            b.wait("document.querySelectorAll('#cards .card').length === %d"
                   " && document.getElementById('runstate')"
                   ".getAttribute('data-idle') === 'yes'" % len(names), 600,
                   "every strategy's card")
            time.sleep(2)  # the page's next refresh: every number final
            b.screenshot(png)
        print("screenshots: %s" % png)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seckill", required=True)
    ap.add_argument("--rig", required=True)
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--svg", default="build/seckill-demo.svg")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    chart(a.seckill, a.svg, os.path.join(a.out, "seckill-chart.png"))
    rig_page(a.rig, os.path.join(a.out, "rig-page.png"))


if __name__ == "__main__":
    main()
