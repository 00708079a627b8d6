#!/usr/bin/env python3
"""chart_test.py -- dlock-seckill's --chart as a person sees it (issue 29).

  chart_test.py BINARY HEADLESS_PY [--keep DIR]

Runs dlock-seckill for several strategy sets (every strategy in every
scenario; one strategy in a plain run; three strategies in two scenarios;
four in one run with --kill-holder),
each with --json and --chart, renders every SVG in headless Chromium and
checks, with the boxes the browser computed (getBBox of every <text>):
  - no text leaves the canvas, no two texts overlap;
  - each cell's texts stay inside the cell's coloured box;
  - each cell says what the JSON says happened there ("ok", "oversold N",
    "lost N", "deadlocked after N sold", ...);
  - each distinct lesson of a failed run is written once under the matrix.
Exit 0 pass, 1 fail, 77 skip (no Chromium). Bounded: every run has a
timeout, the browser calls too.
"""

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77


def timeout_mult():
    """The build's slowness (DLOCK_TEST_TIMEOUT_MULT: 3 for TSan, 4 for
    valgrind): a TSan dlock-seckill ran the "all" set past a fixed 150 s."""
    try:
        return max(1, int(os.environ.get("DLOCK_TEST_TIMEOUT_MULT", "1")))
    except ValueError:
        return 1


RUNS = [
    ("all", ["--strategy", "all", "--scenarios", "all", "--requests", "200",
             "--stock", "20", "--threads", "4", "--lease-ms", "300",
             "--watchdog-ms", "500", "--stall-ms", "1500"]),
    ("one", ["--strategy", "dlock", "--requests", "100", "--stock", "10",
             "--threads", "4"]),
    ("three", ["--strategy", "none,setnx-expire,atomic", "--scenarios",
               "kill-holder,short-lease", "--requests", "150", "--stock",
               "15", "--threads", "4", "--lease-ms", "300", "--stall-ms",
               "1500"]),
    ("killed", ["--strategy", "none,local,setnx,owner-lua", "--kill-holder",
                "--requests", "100", "--stock", "10", "--threads", "4",
                "--lease-ms", "300", "--stall-ms", "1000"]),
]

COLLECT = r"""
(function(){
  var svg = document.documentElement;
  var out = {width: +svg.getAttribute('width'),
             height: +svg.getAttribute('height'), texts: [], cells: []};
  function box(e){var b=e.getBBox();return [b.x,b.y,b.x+b.width,b.y+b.height];}
  document.querySelectorAll('text').forEach(function(t){
    var g = t.closest('g[data-cell]');
    out.texts.push({text: t.textContent, cls: t.getAttribute('class'),
                    cell: g ? g.getAttribute('data-cell') : null, box: box(t)});
  });
  document.querySelectorAll('rect[data-cell]').forEach(function(r){
    out.cells.push({cell: r.getAttribute('data-cell'),
                    strategy: r.getAttribute('data-strategy'),
                    scenario: r.getAttribute('data-scenario'), box: box(r)});
  });
  return out;
})()
"""

TOL = 0.5  # px: boxes that only touch do not overlap


def load(path):
    loader = importlib.machinery.SourceFileLoader("headless", path)
    spec = importlib.util.spec_from_loader("headless", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def overlap(a, b):
    return (min(a[2], b[2]) - max(a[0], b[0]) > TOL and
            min(a[3], b[3]) - max(a[1], b[1]) > TOL)


def inside(a, outer):
    return (a[0] >= outer[0] - TOL and a[1] >= outer[1] - TOL and
            a[2] <= outer[2] + TOL and a[3] <= outer[3] + TOL)


def expected_label(r):
    """What the cell must say first, from the JSON result."""
    if r.get("cell"):  # a scenario's own label (the failover scenario)
        return r["cell"]
    if r["correct"]:
        return "ok"
    if r["oversold"] > 0:
        return "oversold %d" % r["oversold"]
    if r["lost_updates"] > 0:
        return "lost %d" % r["lost_updates"]
    if r["duplicate_users"] > 0:
        return "%d users bought twice" % r["duplicate_users"]
    if r["deadlocked"] > 0:
        return "deadlocked after %d sold" % r["orders"]
    if r["stuck_lock"]:
        return "lock left behind"
    if r["unfinished"] > 0:
        return "too slow"
    return "errors %d" % r["errors"]


def columns(doc):
    """[(scenario name, {strategy: result})] in the chart's column order."""
    if "scenarios" in doc:
        return [(s["scenario"], {r["name"]: r for r in s["strategies"]})
                for s in doc["scenarios"]]
    return [("this run", {r["name"]: r for r in doc["strategies"]})]


def check_chart(name, got, doc):
    errs = []
    W, H = got["width"], got["height"]
    texts = got["texts"]
    if not texts or not got["cells"]:
        errs.append("%s: no texts or no cells (%d texts, %d cells)"
                    % (name, len(texts), len(got["cells"])))
    for t in texts:
        if not inside(t["box"], [0, 0, W, H]):
            errs.append("%s: %r leaves the %gx%g canvas: %s"
                        % (name, t["text"], W, H, t["box"]))
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            if overlap(texts[i]["box"], texts[j]["box"]):
                errs.append("%s: %r overlaps %r (%s, %s)"
                            % (name, texts[i]["text"], texts[j]["text"],
                               texts[i]["box"], texts[j]["box"]))
    cells = {c["cell"]: c for c in got["cells"]}
    for t in texts:
        if t["cell"] and not inside(t["box"], cells[t["cell"]]["box"]):
            errs.append("%s: %r sticks out of its cell %s"
                        % (name, t["text"], cells[t["cell"]]["strategy"]))
    cols = columns(doc)
    seen = set()
    for c in got["cells"]:
        scen = c["scenario"]
        col = [res for n, res in cols if n == scen]
        said = " ".join(t["text"] for t in texts if t["cell"] == c["cell"])
        if not col or c["strategy"] not in col[0]:
            # a scenario only some strategies run (failover: dlock, etcd)
            # shows the others as "not run" -- and must say so
            if col and said.startswith("not run"):
                continue
            errs.append("%s: a cell for %s/%s, which did not run, says %r"
                        % (name, c["strategy"], scen, said))
            continue
        want = expected_label(col[0][c["strategy"]])
        if not said.startswith(want):
            errs.append("%s: cell %s/%s says %r, the run: %r"
                        % (name, c["strategy"], scen, said, want))
        seen.add((c["strategy"], scen))
    for scen, res in cols:
        for s in res:
            if (s, scen) not in seen:
                errs.append("%s: no cell for %s/%s" % (name, s, scen))
    # each lesson's lines joined again ("who: text"), by its class
    written = {}
    for t in texts:
        c = (t["cls"] or "").split()
        if len(c) == 2 and c[0] == "lesson":
            written[c[1]] = (written.get(c[1], "") + " " + t["text"]).strip()
    said = [w.split(": ", 1)[1] for w in written.values() if ": " in w]
    distinct = {r["lesson"] for _, res in cols for r in res.values()
                if not r["correct"] and r["lesson"]}
    for text in distinct:
        n = said.count(text)
        if n != 1:
            errs.append("%s: lesson written %d times: %r" % (name, n, text))
    return errs


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: chart_test.py BINARY HEADLESS_PY [--keep DIR]")
    binary, hl = sys.argv[1], load(sys.argv[2])
    if not hl.find_chromium():
        print("SKIP: chromium is not installed (scripts/install-deps.sh "
              "test): the chart was not checked in a browser")
        return SKIP
    keep = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--keep" \
        else None
    tmp = keep or tempfile.mkdtemp(prefix="chart-test-")
    os.makedirs(tmp, exist_ok=True)
    errs = []
    docs = {}
    for name, args in RUNS:
        svg = os.path.join(tmp, name + ".svg")
        p = subprocess.run([binary, "--json", "--chart", svg] + args,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=150 * timeout_mult())
        if p.returncode != 0:
            print("FAIL: %s exited %d: %s" % (name, p.returncode,
                                              p.stderr.decode()[-500:]))
            return 1
        docs[name] = json.loads(p.stdout)
    with hl.Browser(width=1200, height=900) as b:
        for name, _ in RUNS:
            svg = os.path.join(tmp, name + ".svg")
            b.open("file://" + svg)
            got = b.js(COLLECT)
            print("%s: %dx%d, %d texts, %d cells" % (
                name, got["width"], got["height"], len(got["texts"]),
                len(got["cells"])))
            errs += check_chart(name, got, docs[name])
            if errs and not keep:
                b.screenshot(os.path.join(tmp, name + ".png"), False)
    for e in errs:
        print("FAIL: " + e)
    if errs:
        print("files kept in %s" % tmp)
        return 1
    if not keep:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    print("PASS: chart_layout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
