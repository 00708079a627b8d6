#!/usr/bin/env bash
# seckill_test.sh BINARY CASE -- one scenario of dlock-seckill (issue 3), run
# against the private redis-server the tool starts itself. Registered as the
# ctest cases seckill.<case> by tests/cmake/seckill.cmake (label "tool").
# Every run is bounded by `timeout`; no speed is asserted.
set -u
BIN=${1:?binary}
CASE=${2:?case}
TMP=$(mktemp -d /tmp/seckill-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

fail() { echo "FAIL ($CASE): $*" >&2; exit 1; }

# The build's slowness (make test-tsan: 3, test-valgrind: 4): the hang
# guards below are scaled by it -- json_all's 15 strategies took more than
# 120 s under TSan on a loaded machine, each of them correct.
MULT=${DLOCK_TEST_TIMEOUT_MULT:-1}
# run ARGS... : the tool with --json, stdout to $TMP/out.json; exit status
run() {
  timeout $((120 * MULT)) "$BIN" --json "$@" >"$TMP/out.json" 2>"$TMP/err.txt"
}

# field STRATEGY KEY : one number (or true/false) of the JSON result
field() {
  python3 - "$TMP/out.json" "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["strategies"]:
    if s["name"] == sys.argv[2]:
        v = s[sys.argv[3]]
        print(str(v).lower() if isinstance(v, bool) else v)
        sys.exit(0)
sys.exit("no strategy " + sys.argv[2])
PY
}

# fields STRATEGY KEY... : several values of one strategy, space-separated
# (one python start per run: the machine may be loaded)
fields() {
  python3 - "$TMP/out.json" "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["strategies"]:
    if s["name"] == sys.argv[2]:
        print(" ".join(str(s[k]).lower() if isinstance(s[k], bool) else str(s[k])
                       for k in sys.argv[3:]))
        sys.exit(0)
sys.exit("no strategy " + sys.argv[2])
PY
}

# must_oversell STRATEGY ARGS... : at least one of 3 runs oversells
must_oversell() {
  local s=$1; shift
  for i in 1 2 3; do
    run --strategy "$s" "$@" || fail "run $i exited $?: $(cat "$TMP/err.txt")"
    local o l c
    read -r o l c <<<"$(fields "$s" oversold lost_updates correct)" ||
      fail "bad JSON"
    echo "$s run $i: oversold $o, lost $l, correct $c"
    [ "$c" = false ] || [ "$o" -eq 0 ] || fail "oversold but reported correct"
    [ "$o" -gt 0 ] && return 0
  done
  fail "$s never oversold in 3 runs"
}

# correct_or_late STRATEGY: the run was correct, or the only thing short of
# it is requests still queued at --deadline-ms after the sale had ended --
# every item sold, none oversold or lost, no error, duplicate, deadlock or
# stuck lock. On a machine loaded past CI's (stress-ng plus a second suite,
# ASan) fair --kill-holder and redlock sold all 100 items but left 35-192
# sold-out answers unsent at the 60 s deadline; those cannot make a sale
# wrong, so they are reported, not failed.
correct_or_late() {
  local c u e dup d stuck st orders o l
  read -r c u e dup d stuck st orders o l <<<"$(fields "$1" correct unfinished \
    errors duplicate_users deadlocked stuck_lock final_stock orders oversold \
    lost_updates)" || return 1
  [ "$c" = true ] && return 0
  if [ "$u" -gt 0 ] && [ "$e" -eq 0 ] && [ "$dup" -eq 0 ] && [ "$d" -eq 0 ] &&
    [ "$stuck" = false ] && [ "$st" -eq 0 ] && [ "$orders" -eq 100 ] &&
    [ "$o" -eq 0 ] && [ "$l" -eq 0 ]; then
    echo "$1: sold out correctly; $u sold-out answers unsent at the deadline (slow machine)"
    return 0
  fi
  return 1
}

# never_wrong STRATEGY ARGS... : 3 runs, never oversold / lost / wrong.
# --deadline-ms 60000: a slow (sanitizer, loaded machine) run must not be
# cut off and reported "unfinished"; a stuck one is still stopped by the
# no-progress limit (--stall-ms).
# 500 requests instead of 1000: still 5x the stock (sold out, same
# contention), half the time.
never_wrong() {
  local s=$1; shift
  for i in 1 2 3; do
    run --strategy "$s" --requests 500 --deadline-ms 60000 "$@" ||
      fail "run $i exited $?: $(cat "$TMP/err.txt")"
    local o l c orders st
    read -r o l c orders st <<<"$(fields "$s" oversold lost_updates correct \
      orders final_stock)" || fail "bad JSON"
    echo "$s run $i: orders $orders, stock $st, oversold $o, lost $l, correct $c"
    [ "$o" -eq 0 ] || fail "$s oversold $o"
    [ "$l" -eq 0 ] || fail "$s lost $l updates"
    correct_or_late "$s" || fail "$s not correct: $(cat "$TMP/out.json")"
    # 500 requests for 100 items -> all sold, none left
    [ "$orders" -eq 100 ] && [ "$st" -eq 0 ] || fail "$s sold $orders, $st left"
  done
}

case "$CASE" in
none_oversells) must_oversell none ;;
local_oversells) must_oversell local ;;
set_nx_px_short_lease_oversells)
  must_oversell set-nx-px --lease-ms 1 --work-ms 2-4 ;;
setnx_kill_holder_deadlocks)
  start=$(date +%s)
  run --strategy setnx --kill-holder --stall-ms 1500 ||
    fail "exited $?: $(cat "$TMP/err.txt")"
  took=$(( $(date +%s) - start ))
  d=$(field setnx deadlocked); k=$(field setnx victim_killed)
  echo "setnx --kill-holder: deadlocked $d, victim killed $k, ${took}s"
  [ "$k" = true ] || fail "the victim was not killed"
  [ "$d" -gt 0 ] || fail "no deadlock reported"
  [ "$(field setnx correct)" = false ] || fail "reported correct"
  [ "$(field setnx stuck_lock)" = true ] || fail "no stuck lock key seen"
  [ "$took" -lt 60 ] || fail "took ${took}s" ;;
dlock_kill_holder_recovers | fair_kill_holder_recovers | spin_kill_holder_recovers)
  # the killed worker's lock expires after the watchdog lease (default 2 s
  # in the lab) and the others sell the rest: correct, nothing deadlocked
  s=${CASE%%_kill_holder_recovers}
  run --strategy "$s" --kill-holder --deadline-ms 60000 || fail "exited $?: $(cat "$TMP/err.txt")"
  read -r k d o l orders c <<<"$(fields "$s" victim_killed deadlocked \
    oversold lost_updates orders correct)" || fail "bad JSON"
  echo "$s --kill-holder: victim killed $k, deadlocked $d, orders $orders," \
    "oversold $o, lost $l, correct $c"
  [ "$k" = true ] || fail "the victim was not killed"
  [ "$d" -eq 0 ] && [ "$o" -eq 0 ] && [ "$l" -eq 0 ] || fail "not recovered"
  [ "$orders" -eq 100 ] || fail "sold $orders of 100"
  correct_or_late "$s" || fail "not correct: $(cat "$TMP/out.json")" ;;
redlock_correct)
  # every Redlock round is one thread per master and a loser pauses 20-200
  # ms: 4 threads per process keep it quick even under TSan
  run --strategy redlock --requests 300 --threads 4 --deadline-ms 60000 ||
    fail "exited $?: $(cat "$TMP/err.txt")"
  if python3 -c 'import json,sys; d=json.load(open(sys.argv[1]));
sys.exit(0 if any(x["name"]=="redlock" for x in d["skipped"]) else 1)' \
    "$TMP/out.json"; then
    echo "redlock not built (src/kinds/redlock.c without dlock_redlock_new): skip"
    exit 77
  fi
  read -r o l orders c <<<"$(fields redlock oversold lost_updates orders \
    correct)" || fail "bad JSON"
  echo "redlock: orders $orders, oversold $o, lost $l, correct $c"
  [ "$o" -eq 0 ] && [ "$l" -eq 0 ] && [ "$orders" -eq 100 ] &&
    correct_or_late redlock || fail "redlock wrong: $(cat "$TMP/out.json")" ;;
# owner-lua is correct only while its fixed lease outlives every critical
# section; on a loaded machine under ASan a holder stalled past the 2 s
# default (p99 7.6 s seen under stress-ng) and the lab rightly reported an
# oversell. That is the lesson, not a flake of the tool: give it a lease no
# stall reaches, and test what is promised.
owner_lua_correct) never_wrong owner-lua --lease-ms 60000 ;;
dlock_correct) never_wrong dlock ;;
permits_correct) never_wrong permits ;;
permits_kill_holder_recovers)
  # The victim dies holding a reservation (a permit with --lease-ms 2 s);
  # the unit comes back when the lease ends and is sold: all 400 sold,
  # none oversold, none lost. 400 of 1000 requests: stock is still there
  # when the victim reaches its kill point after its first requests.
  run --strategy permits --kill-holder --stock 400 --deadline-ms 60000 ||
    fail "exited $?: $(cat "$TMP/err.txt")"
  read -r k d o l orders st e stuck c <<<"$(fields permits victim_killed \
    deadlocked oversold lost_updates orders final_stock errors stuck_lock \
    correct)" || fail "bad JSON"
  echo "permits --kill-holder: victim killed $k, deadlocked $d, orders $orders," \
    "stock $st, oversold $o, lost $l, errors $e, stuck $stuck, correct $c"
  [ "$k" = true ] || fail "the victim was not killed"
  [ "$d" -eq 0 ] && [ "$o" -eq 0 ] && [ "$l" -eq 0 ] && [ "$e" -eq 0 ] &&
    [ "$stuck" = false ] || fail "not recovered: $(cat "$TMP/out.json")"
  [ "$orders" -eq 400 ] && [ "$st" -eq 0 ] || fail "sold $orders of 400, $st left" ;;
permits_late_payment_returns_stock)
  # A 1 ms payment window and 2-4 ms of work: every reservation expires
  # before its payment -- most before the reservation's own answer came
  # (DLOCK_ELOST: no reservation, the unit given back at once) -- so every
  # payment is refused and every unit goes back: nothing sold, nothing
  # oversold, the whole stock still there.
  run --strategy permits --lease-ms 1 --work-ms 2-4 --requests 200 \
    --deadline-ms 60000 || fail "exited $?: $(cat "$TMP/err.txt")"
  read -r o l orders st c <<<"$(fields permits oversold lost_updates orders \
    final_stock correct)" || fail "bad JSON"
  echo "permits, payments too late: orders $orders, stock $st, oversold $o, lost $l, correct $c"
  [ "$o" -eq 0 ] && [ "$l" -eq 0 ] || fail "oversold $o, lost $l"
  [ $((orders + st)) -eq 100 ] || fail "sold $orders and $st left of 100: units lost"
  [ "$c" = true ] || fail "not correct: $(cat "$TMP/out.json")" ;;
segmented_correct)
  never_wrong segmented
  # Its p50 printed 0.00 ms: most sold-out requests were answered by a
  # per-process cache without touching Redis (issue 18). Every request now
  # reads the stock from Redis, as in the other strategies: a round trip,
  # never the ~1 us of a local check.
  p50=$(field segmented p50_ms)
  echo "segmented p50 $p50 ms"
  python3 -c "import sys; sys.exit(0 if float('$p50') >= 0.01 else 1)" ||
    fail "segmented p50 $p50 ms: requests answered without Redis" ;;
atomic_correct) never_wrong atomic ;;
fair_correct) never_wrong fair ;;
# issue 31: the spin lock (no pub/sub) never oversells, and a killed holder's
# lock expires and the others sell the rest
spin_correct) never_wrong spin ;;
users_dlock_no_duplicates)
  for i in 1 2 3; do
    run --strategy dlock --users 50 --deadline-ms 60000 || fail "exited $?"
    du=$(field dlock duplicate_users); o=$(field dlock orders)
    echo "dlock --users 50 run $i: orders $o, users with >1 order $du"
    [ "$du" -eq 0 ] || fail "$du users bought twice"
    [ "$o" -le 50 ] || fail "$o orders from 50 users"
  done ;;
json_all)
  # --lease-ms 60000: owner-lua is asserted correct below (see
  # owner_lua_correct for why the default 2 s lease cannot be). This case
  # checks the JSON of every strategy, not throughput: 160 requests for 40
  # items (400 for 100 took over the 120 s bound under ASan with
  # stress-ng --cpu 4).
  # --stall-ms: a strategy that stops making progress ends after 10 s x
  # MULT, not after the 60 s lease + 2.5 s (make test-stress: redlock
  # stalled 62 s under ASan beside stress-ng --cpu 4 and the run passed
  # its 120 s bound; this case checks the JSON, not redlock's speed).
  run --strategy all --requests 160 --stock 40 --lease-ms 60000 \
    --stall-ms $((10000 * MULT)) ||
    fail "exited $?: $(cat "$TMP/err.txt")"
  python3 - "$TMP/out.json" <<'PY' || fail "JSON check failed"
import json, sys
d = json.load(open(sys.argv[1]))
names = [s["name"] for s in d["strategies"]] + [s["name"] for s in d["skipped"]]
want = ["none", "local", "setnx", "setnx-expire", "getset", "set-nx-px",
        "owner-lua", "dlock", "segmented", "atomic", "fair", "redlock",
        "spin", "permits", "etcd"]
assert sorted(names) == sorted(want), names
for s in d["strategies"]:
    for k in ("orders", "final_stock", "oversold", "lost_updates", "rejected",
              "errors", "deadlocked", "throughput", "p50_ms", "p99_ms"):
        assert isinstance(s[k], (int, float)), (s["name"], k)
    if s["name"] in ("owner-lua", "dlock", "segmented", "atomic", "fair",
                     "spin", "permits", "etcd"):
        assert s["oversold"] == 0 and s["lost_updates"] == 0, s
    print(s["name"], s["correct"], s["oversold"])
PY
  ;;
chart_svg)
  timeout $((120 * MULT)) "$BIN" --strategy none,dlock,atomic --chart "$TMP/c.svg" \
    >"$TMP/out.txt" 2>&1 || fail "exited $?"
  grep -q "^dlock " "$TMP/out.txt" || fail "no table: $(cat "$TMP/out.txt")"
  python3 - "$TMP/c.svg" <<'PY' || fail "not a valid SVG"
import sys, xml.dom.minidom
doc = xml.dom.minidom.parse(sys.argv[1])
root = doc.documentElement
assert root.tagName == "svg", root.tagName
assert root.getAttribute("xmlns") == "http://www.w3.org/2000/svg"
rects = root.getElementsByTagName("rect")
texts = "".join(t.firstChild.data for t in root.getElementsByTagName("text")
                if t.firstChild)
assert len(rects) >= 4, len(rects)
for n in ("none", "dlock", "atomic"):
    assert n in texts, n
# issue 18: throughput on a log scale (decade gridlines), the run's
# settings, the lessons under the matrix; issue 29: a cell per strategy
# (the layout itself: chart_test.py, case chart_layout)
assert "log scale" in texts, "no log scale"
assert "1k" in texts and len(root.getElementsByTagName("line")) >= 3
for s in ("work 0-2 ms", "lease 2000 ms", "watchdog 2000 ms"):
    assert s in texts, "no settings: " + s
assert "none: no lock" in texts, "no lesson"
cells = [r for r in rects if r.getAttribute("data-cell")]
assert len(cells) == 3, len(cells)
print("svg ok:", len(rects), "rects")
PY
  ;;
scenarios)
  # issue 18: one table, a column per scenario; each naive strategy fails in
  # at least one scenario, the correct ones in none (set-nx-px's failure
  # under the short lease is a race: up to 3 runs).
  for i in 1 2 3; do
    run --scenarios normal,kill-holder,short-lease \
      --strategy none,setnx,set-nx-px,dlock --requests 200 \
      --stock 20 --threads 4 --deadline-ms 60000 ||
      fail "exited $?: $(cat "$TMP/err.txt")"
    python3 - "$TMP/out.json" <<'PY' && break
import json, sys
d = json.load(open(sys.argv[1]))
sc = {x["scenario"]: {s["name"]: s for s in x["strategies"]} for x in d["scenarios"]}
assert sorted(sc) == ["kill-holder", "normal", "short-lease"], sorted(sc)
assert sc["kill-holder"]["setnx"]["victim_killed"] is True
assert sc["kill-holder"]["setnx"]["deadlocked"] > 0, "setnx survived the kill"
assert sc["normal"]["setnx"]["correct"] and sc["normal"]["none"]["correct"] is False
for s in ("normal", "kill-holder", "short-lease"):
    assert sc[s]["dlock"]["correct"], (s, sc[s]["dlock"])
print("set-nx-px short-lease: correct", sc["short-lease"]["set-nx-px"]["correct"])
assert d["correct_in_all"] == ["dlock"], d["correct_in_all"]
PY
    [ "$i" -lt 3 ] || fail "scenarios: $(cat "$TMP/out.json")"
  done
  timeout $((120 * MULT)) "$BIN" --scenarios normal,short-lease --strategy none,dlock \
    --requests 40 --stock 10 --threads 2 >"$TMP/out.txt" 2>&1 || fail "text: exited $?"
  grep -Eq "^strategy +normal +short-lease +verdict +req/s" "$TMP/out.txt" &&
    grep -Eq "^none +NO oversold [0-9]+ +NO oversold [0-9]+ +FAILS" "$TMP/out.txt" &&
    grep -Eq "^dlock +ok +ok +correct" "$TMP/out.txt" &&
    grep -q "^  none (normal, short-lease): no lock" "$TMP/out.txt" ||
    fail "table: $(cat "$TMP/out.txt")" ;;
failover)
  # issue 42: the lock store fails over while A holds the last item's lock:
  # dlock on Redis Sentinel with a lagging replica hands it to B too (two
  # holders, oversold -- a race: up to 3 runs), dlock on etcd keeps it (B
  # waits); other strategies are not run in this scenario
  for i in 1 2 3; do
    run --scenarios failover --strategy none,dlock,etcd ||
      fail "exited $?: $(cat "$TMP/err.txt")"
    python3 - "$TMP/out.json" <<'PY' && break
import json, shutil, sys
d = json.load(open(sys.argv[1]))
sc = {x["scenario"]: {s["name"]: s for s in x["strategies"]} for x in d["scenarios"]}
assert sorted(sc) == ["failover"], sorted(sc)
f = sc["failover"]
assert "none" not in f, f.get("none")  # not run: listed as skipped
r = f["dlock"]
print("redis:", r["cell"], "-", r["lesson"])
assert r["oversold"] == 1 and not r["correct"], r
if shutil.which("etcd"):
    e = f["etcd"]
    print("etcd:", e["cell"], "-", e["lesson"])
    assert e["correct"] and e["oversold"] == 0 and e["orders"] == 1, e
    assert "(CP)" in e["lesson"] and "(AP)" in r["lesson"]
PY
    [ "$i" -lt 3 ] || fail "failover: $(cat "$TMP/out.json")"
  done ;;
bad_input)
  for args in "--procs 0" "--threads x" "--strategy nope" "--work-ms 3-1" \
    "--requests" "--bogus" "extra" "--url http://x" "--stock -5" \
    "--segments 999" "--lease-ms 0" "--scenarios nope" \
    "--scenarios all --kill-holder"; do
    # shellcheck disable=SC2086
    timeout 30 "$BIN" $args >"$TMP/o" 2>"$TMP/e"
    rc=$?
    echo "$args -> $rc: $(head -1 "$TMP/e")"
    [ "$rc" -eq 64 ] || fail "'$args' exited $rc, want 64"
    [ "$(wc -l <"$TMP/e")" -eq 1 ] || fail "'$args': not one line: $(cat "$TMP/e")"
    [ ! -s "$TMP/o" ] || fail "'$args' printed on stdout"
  done
  timeout 60 "$BIN" --url redis://127.0.0.1:1 --strategy none >/dev/null 2>&1
  rc=$?; echo "unreachable --url -> $rc"
  [ "$rc" -eq 69 ] || fail "unreachable --url exited $rc, want 69"
  timeout 10 "$BIN" --help | grep -q -- "--kill-holder" || fail "--help"
  timeout 10 "$BIN" --version | grep -q "^dlock-seckill " || fail "--version" ;;
*) fail "unknown case" ;;
esac
echo "PASS ($CASE)"
