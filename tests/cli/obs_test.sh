#!/usr/bin/env bash
# obs_test.sh DLOCK_BINARY SOURCE_DIR CASE -- one scenario of the operator's
# commands `dlock list`, `dlock top`, `dlock exporter` (issue 27) against a
# private redis-server (unix socket in a fresh temp dir, killed with the
# test), with real dlock processes holding and waiting. Registered per case
# by tests/cmake/obs.cmake. Every wait is a bounded loop.
set -u
DL=$1
SRC=$2
CASE=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/obstest.XXXXXX")
SOCK=$T/redis.sock
export DLOCK_URL="unix://$SOCK"
unset DLOCK_CONFIG
REDIS_PIDS=()

cleanup() {
  local p
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  for p in "${REDIS_PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$CASE]: $*" >&2
  for f in "$T"/*.err "$T"/out; do
    [ -s "$f" ] && { echo "--- $f" >&2; head -c 4000 "$f" >&2; }
  done
  exit 1
}
note() { echo "[$CASE] $*"; }

start_redis() {
  setpriv --pdeathsig KILL redis-server --port 0 --unixsocket "$SOCK" \
    --unixsocketperm 700 --save '' --appendonly no --dir "$T" \
    --logfile "$T/redis.log" &
  REDIS_PIDS+=($!)
  local i
  for i in $(seq 1 200); do
    redis-cli -s "$SOCK" ping 2>/dev/null | grep -q PONG && return 0
    sleep 0.025
  done
  fail "redis-server did not start"
}
R() { redis-cli -s "$SOCK" "$@"; }
wait_until() { # SECONDS COMMAND...: polls every 20 ms
  local limit=$1 i
  shift
  for i in $(seq 1 $((limit * 50))); do
    "$@" && return 0
    sleep 0.02
  done
  return 1
}
key_exists() { [ "$(R exists "$1")" = 1 ]; }
file_has() { [ -s "$1" ]; }
hlen_is() { [ "$(R hlen "$1")" = "$2" ]; }
qlen_is() { [ "$(R llen "redisson_lock_queue:{$1}")" = "$2" ]; }
dl() { timeout -k 2 30 "$DL" "$@"; }
# A holder's command: holds until the case ends (cleanup kills it) or 600 s,
# never for a fixed time a loaded machine's slow case can outlast (at load
# 25 list_json ran 85 s, past its holders' `sleep 80`).
HOLD='i=0; while [ $i -lt 6000 ]; do sleep 0.1; i=$((i + 1)); done'

expect_rc() { # WANT ARGS...
  local want=$1 rc
  shift
  dl "$@" >"$T/out" 2>"$T/last.err"
  rc=$?
  [ "$rc" = "$want" ] || fail "dlock $* exited $rc, expected $want: $(cat "$T/last.err")"
  ! grep -q Sanitizer "$T/last.err" || fail "dlock $*: sanitizer report"
}
# The python3 that has python3-prometheus-client (a pyenv python3 first on
# PATH may lack Debian's packages).
prom_python() {
  local py
  for py in python3 /usr/bin/python3; do
    "$py" -c 'import prometheus_client' 2>/dev/null && { echo "$py"; return 0; }
  done
  return 1
}
# json_check FILE PYTHON-EXPR: FILE is one JSON document d for which the
# expression is true (helpers: L(name) = the lock of that name).
json_check() {
  python3 -c 'import json, sys, time
d = json.load(open(sys.argv[1]))
L = lambda n: next((l for l in d["locks"] if l["name"] == n), None)
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$1" "$2"
}

start_redis

# The lock space every case looks at: a mutex with one holder and one
# waiter in its hand-over queue, a fair lock with two queued waiters, a
# read-write lock with two readers, a semaphore with two permits taken
# (Redisson's RPermitExpirableSemaphore layout: the holders are its
# permits) and one with a waiter subscribed, and keys that are no locks.
populate() {
  local i
  "$DL" m1 -- sh -c "$HOLD" 2>"$T/m1.err" &
  M1=$!
  wait_until 20 key_exists m1 || fail "no holder of m1"
  "$DL" -w 600 m1 -- true 2>"$T/m1w.err" &
  M1W=$!
  wait_until 20 key_exists "dlock_lock_queue:{m1}" || fail "no waiter queued on m1"
  "$DL" --fair f1 -- sh -c "$HOLD" 2>"$T/f1.err" &
  wait_until 20 key_exists f1 || fail "no holder of f1"
  "$DL" --fair -w 600 f1 -- true 2>"$T/f1w1.err" &
  wait_until 20 qlen_is f1 1 || fail "first fair waiter not queued"
  "$DL" --fair -w 600 f1 -- true 2>"$T/f1w2.err" &
  wait_until 20 qlen_is f1 2 || fail "second fair waiter not queued"
  "$DL" -s rw1 -- sh -c "$HOLD" 2>"$T/rw1a.err" &
  "$DL" -s rw1 -- sh -c "$HOLD" 2>"$T/rw1b.err" &
  wait_until 20 hlen_is rw1 3 || fail "rw1 has not two readers: $(R hgetall rw1)"
  R set sem1 1 >/dev/null
  R zadd '{sem1}:timeout' 9999999999999 "aaaaaaaaaaaaaaaa" 9999999999999 \
    "bbbbbbbbbbbbbbbb" >/dev/null
  R set sem2 0 >/dev/null
  redis-cli -s "$SOCK" subscribe 'redisson_sc:{sem2}' >/dev/null 2>&1 &
  wait_until 20 sh -c "[ \"\$(redis-cli -s $SOCK pubsub numsub 'redisson_sc:{sem2}' | sed -n 2p)\" = 1 ]" ||
    fail "no subscriber on sem2"
  "$DL" --fence fe1 -- sh -c "$HOLD" 2>"$T/fe1.err" &
  wait_until 20 key_exists fe1 || fail "no holder of fe1"
  R set l1 2 >/dev/null
  redis-cli -s "$SOCK" subscribe 'redisson_countdownlatch__channel__{l1}' >/dev/null 2>&1 &
  wait_until 20 sh -c "[ \"\$(redis-cli -s $SOCK pubsub numsub 'redisson_countdownlatch__channel__{l1}' | sed -n 2p)\" = 1 ]" ||
    fail "no subscriber on l1"
  for i in $(seq 1 50); do echo "SET plain$i v$i"; done | R >/dev/null
  R hset userhash field value >/dev/null
  # a big hash whose fields look like holders: too big to be a lock, and
  # never read whole
  python3 -c 'for i in range(600): print("HSET bighash 0b1e1c7e-0000-4000-8000-%012d:1 1" % i)' |
    R >/dev/null
  R set counter 42 >/dev/null
}

case "$CASE" in
list_json)
  T0=$(date +%s)
  populate
  # Hold starts are published once a hold has lasted 100 ms: poll (bounded)
  # until every holder's start is there.
  ok=0
  end=$(($(date +%s) + 30))
  while [ "$(date +%s)" -lt $end ]; do
    dl list --json >"$T/out" 2>"$T/last.err" || fail "list exited $?"
    if json_check "$T/out" 'all(h["since_ms"] for n in ("m1","f1","rw1") for h in L(n)["holders"]) and all(w["alive"] for n in ("m1","f1") for w in L(n)["waiters"])'; then
      ok=1
      break
    fi
    sleep 0.05
  done
  [ $ok = 1 ] || fail "holders' since or waiters' info never published"
  note "populated in $((end - 30 - T0)) s; starts and waiters published $(($(date +%s) - end + 30)) s later"
  cp "$T/out" "$T/list.json"
  json_check "$T/out" 'sorted(l["name"] for l in d["locks"]) == ["f1","fe1","l1","m1","rw1","sem1","sem2"]' ||
    fail "locks listed: $(cat "$T/out")"
  json_check "$T/out" 'L("m1")["kind"] == "mutex" and len(L("m1")["holders"]) == 1' || fail "m1"
  h=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
h=[l for l in d["locks"] if l["name"]=="m1"][0]["holders"][0]
print(h["pid"], h["program"], h["alive"], 0 < h["held_ms"] < 60000)' "$T/out")
  [ "$h" = "$M1 dlock True True" ] || fail "m1's holder: $h (want pid $M1)"
  json_check "$T/out" 'len(L("m1")["waiters"]) == 1 and L("m1")["waiters"][0]["queue"] == "handover"' ||
    fail "m1's waiter"
  json_check "$T/out" "L('m1')['waiters'][0]['pid'] == $M1W and L('m1')['waiters'][0]['program'] == 'dlock'" ||
    fail "m1's waiter is not pid $M1W"
  json_check "$T/out" 'L("f1")["kind"] == "fair" and len(L("f1")["holders"]) == 1 and [w["queue"] for w in L("f1")["waiters"]] == ["fair", "fair"] and all(w["deadline_ms"] > 0 for w in L("f1")["waiters"])' ||
    fail "f1"
  # Every waiter with the time its wait began (issue 39): the hand-over
  # queue dates its entries, a fair waiter's client its wait; both before
  # now and after the populate began.
  json_check "$T/out" "all($T0 * 1000 - 2000 <= w['since_ms'] <= time.time() * 1000 + 2000 and w['waited_ms'] >= 0 and w['host'] and w['pid'] > 0 for n in ('m1', 'f1') for w in L(n)['waiters'])" ||
    fail "waiters' since: $(cat "$T/out")"
  # Unknown is null, never a fake 0: the permits of sem1 were written by
  # hand, no client lists them.
  json_check "$T/out" 'all(h["host"] is None and h["pid"] is None and h["program"] is None and h["alive"] is False for h in L("sem1")["holders"])' ||
    fail "sem1's holders are not null: $(cat "$T/out")"
  json_check "$T/out" 'L("m1")["waiters"][0]["deadline_ms"] > 0' ||
    fail "m1's waiter (-w 600) has no deadline"
  json_check "$T/out" 'L("rw1")["kind"] == "rwlock" and [h["mode"] for h in L("rw1")["holders"]] == ["read", "read"] and all(h["alive"] and h["host"] and h["pid"] for h in L("rw1")["holders"])' ||
    fail "rw1"
  json_check "$T/out" 'L("sem1")["kind"] == "permits" and L("sem1")["value"] == 1 and sorted(h["owner"] for h in L("sem1")["holders"]) == ["61"*16, "62"*16]' ||
    fail "sem1"
  json_check "$T/out" 'L("sem2")["kind"] == "semaphore" and L("sem2")["subscribers"] == 1' || fail "sem2"
  json_check "$T/out" 'L("fe1")["kind"] == "fenced" and len(L("fe1")["holders"]) == 1' || fail "fe1"
  json_check "$T/out" 'L("l1")["kind"] == "latch" and L("l1")["value"] == 2 and L("l1")["subscribers"] == 1' || fail "l1"
  json_check "$T/out" 'd["keys_scanned"] >= 60 and d["nodes"] == 1 and d["truncated"] is False' ||
    fail "summary"
  # --all adds the integer strings nothing marks; a pattern narrows.
  expect_rc 0 list --json --all
  json_check "$T/out" 'L("counter")["kind"] == "counter" and L("counter")["value"] == 42' || fail "--all"
  expect_rc 0 list --json 'f?'
  json_check "$T/out" '[l["name"] for l in d["locks"]] == ["f1"]' || fail "pattern"
  # The text form names the holder's process.
  expect_rc 0 list
  grep -q "^m1  mutex" "$T/out" || fail "text: no m1 line"
  grep -q "holder .* pid=$M1 program=dlock since=20" "$T/out" || fail "text: m1's holder"
  grep -q "^7 locks; " "$T/out" || fail "text: summary"
  # --max-keys bounds the scan and says so.
  expect_rc 0 list --json --max-keys 5 --scan-count 5
  json_check "$T/out" 'd["truncated"] is True' || fail "--max-keys"
  # Errors.
  expect_rc 69 -u "unix://$T/none.sock" list
  # Every URL form is served: a TLS URL is tried (here nobody listens).
  expect_rc 69 -u rediss://127.0.0.1:1 list
  grep -q "^dlock: cannot reach Redis at rediss://127.0.0.1:1: " "$T/last.err" ||
    fail "rediss: $(cat "$T/last.err")"
  expect_rc 64 list a b
  expect_rc 64 list --listen :1
  grep -q "does not apply to 'list'" "$T/last.err" || fail "$(cat "$T/last.err")"
  # With a command, "list" and "top" are lock names, as before.
  expect_rc 0 top -- touch "$T/ran-top"
  [ -e "$T/ran-top" ] || fail "dlock top -- CMD did not run CMD"
  expect_rc 0 list -c "touch $T/ran-list"
  [ -e "$T/ran-list" ] || fail "dlock list -c CMD did not run CMD"
  expect_rc 0 list --help
  grep -q "dlock exporter --listen" "$T/out" || fail "list --help"
  ;;

exporter)
  populate
  py=$(prom_python) || { echo "SKIP: python3-prometheus-client is not installed"; exit 77; }
  "$DL" exporter --listen 127.0.0.1:0 >"$T/exp.out" 2>"$T/exp.err" &
  EXP=$!
  wait_until 20 grep -q "listening on" "$T/exp.out" || fail "exporter did not start"
  port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$T/exp.out")
  get() { "$py" -c 'import sys, urllib.request
try:
    r = urllib.request.urlopen("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[2]), timeout=20)
    sys.stdout.write(r.read().decode()); print(r.status, file=sys.stderr)
except urllib.error.HTTPError as e:
    print(e.code, file=sys.stderr)' "$port" "$1"; }
  # Poll (bounded) until the hold ages are published.
  end=$(($(date +%s) + 30))
  while [ "$(date +%s)" -lt $end ]; do
    get /metrics >"$T/out" 2>"$T/code"
    grep -q '^dlock_lock_hold_age_seconds{name="rw1"' "$T/out" &&
      grep -q '^dlock_lock_hold_age_seconds{name="m1"' "$T/out" && break
    sleep 0.05
  done
  [ "$(cat "$T/code")" = 200 ] || fail "GET /metrics: $(cat "$T/code")"
  "$py" - "$T/out" >"$T/parsed" 2>"$T/parse.err" <<'EOF' || fail "not Prometheus text: $(cat "$T/parse.err")"
import sys
from prometheus_client.parser import text_string_to_metric_families as p
for f in p(open(sys.argv[1]).read()):
    for s in f.samples:
        lab = ",".join("%s=%s" % kv for kv in sorted(s.labels.items()))
        print("%s{%s} %g" % (s.name, lab, s.value))
EOF
  has() { grep -qxF -- "$1" "$T/parsed" || fail "metrics lack '$1'"; }
  has "dlock_up{node=$SOCK} 1"
  has 'dlock_locks_held{kind=mutex} 1'
  has 'dlock_locks_held{kind=fair} 1'
  has 'dlock_locks_held{kind=rwlock} 1'
  has 'dlock_locks_held{kind=permits} 1'
  has 'dlock_lock_waiters{kind=fair,name=f1} 2'
  has 'dlock_lock_waiters{kind=mutex,name=m1} 1'
  has 'dlock_lock_waiters{kind=semaphore,name=sem2} 1'
  has 'dlock_fair_queue_length{name=f1} 2'
  has 'dlock_lock_holders{kind=rwlock,name=rw1} 2'
  has 'dlock_permits_available{kind=permits,name=sem1} 1'
  grep -q '^dlock_scrape_duration_seconds{} ' "$T/parsed" || fail "no scrape duration"
  grep -q '^dlock_oldest_hold_age_seconds{} [0-9.e+-]*$' "$T/parsed" || fail "no oldest hold age"
  grep -q '^dlock_lock_oldest_wait_seconds{kind=mutex,name=m1} [0-9.e+-]*$' "$T/parsed" ||
    fail "no oldest wait of m1"
  grep -q '^dlock_scrape_error' "$T/parsed" && fail "a scrape error: $(grep dlock_scrape_error "$T/parsed")"
  get /nothing >/dev/null 2>"$T/code"
  [ "$(cat "$T/code")" = 404 ] || fail "GET /nothing: $(cat "$T/code")"
  # Redis gone: dlock_up 0, still valid text.
  kill -STOP "${REDIS_PIDS[0]}"
  kill -9 "${REDIS_PIDS[0]}"
  get /metrics >"$T/out" 2>"$T/code"
  grep -qxF "dlock_up{node=\"$SOCK\"} 0" "$T/out" || fail "Redis gone: $(cat "$T/out")"
  grep -q "^dlock_scrape_error{node=\"$SOCK\",reason=\".*\"} 1$" "$T/out" ||
    fail "no scrape error: $(cat "$T/out")"
  # logged once, timestamped
  grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}Z dlock: scrape incomplete: master ' "$T/exp.err" ||
    fail "exporter log: $(cat "$T/exp.err")"
  kill -TERM "$EXP"
  wait "$EXP"
  rc=$?
  [ $rc = 0 ] || fail "exporter exited $rc on SIGTERM"
  # A bad ADDR is a usage error that names it.
  expect_rc 64 exporter --listen nonsense
  grep -q "invalid --listen 'nonsense'" "$T/last.err" || fail "$(cat "$T/last.err")"
  expect_rc 64 exporter --listen 127.0.0.1:99999
  grep -q "port '99999'" "$T/last.err" || fail "$(cat "$T/last.err")"
  expect_rc 64 exporter
  grep -q "needs --listen" "$T/last.err" || fail "$(cat "$T/last.err")"
  ;;

top_plain)
  populate
  t0=$(date +%s%N)
  dl top -n 3 -i 0.2 >"$T/out" 2>"$T/last.err" </dev/null || fail "top exited $?"
  el=$((($(date +%s%N) - t0) / 1000000))
  note "top -n 3 -i 0.2: $el ms"
  [ "$(grep -c '^dlock top ' "$T/out")" = 3 ] || fail "not 3 refreshes"
  ! grep -q $'\e' "$T/out" || fail "escape sequences when stdout is no tty"
  [ "$(wc -l <"$T/out")" -le $((3 * (2 + 20))) ] || fail "too many lines"
  # The busiest first: f1 (2 waiters) heads each refresh.
  [ "$(grep -A2 '^dlock top ' "$T/out" | grep -c '^f1 ')" = 3 ] || fail "f1 not first"
  grep -q '^m1  *mutex  *1 ' "$T/out" || fail "no m1 row"
  # Hand-overs: a lock taken by one short-lived holder after another.
  "$DL" hc -- sleep 0.3 2>"$T/hc.err"
  ( for i in $(seq 1 40); do "$DL" hc -- sleep 0.15 2>>"$T/hc.err"; done ) &
  CH=$!
  wait_until 20 key_exists hc || fail "no churn on hc"
  dl top -n 15 -i 0.2 hc >"$T/out" 2>"$T/last.err" </dev/null || fail "top hc exited $?"
  kill "$CH" 2>/dev/null
  awk '$1 == "hc" && $4 > 0 { n++ } END { exit n > 0 ? 0 : 1 }' "$T/out" ||
    fail "no hand-overs seen on hc"
  # On a terminal (script(1) gives it one): redrawn in place, q quits.
  if command -v script >/dev/null; then
    (sleep 1; printf q) | timeout -k 2 20 script -qc "$DL top -i 0.2" /dev/null \
      >"$T/tty.out" 2>&1 || fail "top on a tty exited $?"
    grep -q $'\e\\[H\e\\[2J' "$T/tty.out" || fail "no redraw on a tty: $(head -c 300 "$T/tty.out")"
  else
    note "script(1) not installed: the tty mode is not checked"
  fi
  # --limit bounds the rows; SIGINT ends a run without -n.
  dl top -n 1 --limit 2 >"$T/out" 2>"$T/last.err" </dev/null
  [ "$(wc -l <"$T/out")" = 4 ] || fail "--limit 2: $(wc -l <"$T/out") lines"
  "$DL" top -i 0.1 >"$T/top.out" 2>"$T/top.err" </dev/null &
  TP=$!
  wait_until 20 grep -q '^dlock top ' "$T/top.out" || fail "top did not draw"
  kill -INT "$TP"
  wait_until 20 sh -c "! kill -0 $TP 2>/dev/null" || fail "top did not stop on SIGINT"
  wait "$TP"
  rc=$?
  [ $rc = 0 ] || fail "top exited $rc on SIGINT"
  ;;

kinds_and_force)
  # A fair lock held with no waiter is listed (and counted) as fair, from
  # its holder's info key; unlock --force of a fair lock without --fair
  # takes the fair path by itself: its waiter is woken at once (issue 39:
  # it waited out the 1 s recheck).
  "$DL" --fair ff -- sh -c "$HOLD" >/dev/null 2>"$T/ff.err" &
  FH=$!
  wait_until 20 key_exists ff || fail "no holder of ff"
  wait_until 20 sh -c "\"$DL\" list --json ff 2>/dev/null | grep -q '\"kind\":\"fair\"'" ||
    fail "ff not listed as fair: $(dl list --json ff)"
  "$DL" --fair -w 30 ff -- date +%s%N >"$T/ffw.out" 2>"$T/ffw.err" &
  FW=$!
  wait_until 20 qlen_is ff 1 || fail "the fair waiter did not queue"
  sleep 0.3
  # What a fair lock taken at once costs here (the dlock process, its
  # connect, the command's fork and exec): the wake-up's bound adds it, so
  # a loaded machine's slow processes are not taken for the 1 s recheck.
  b0=$(date +%s%N)
  "$DL" --fair ffbase -- date +%s%N >"$T/base.out" 2>"$T/base.err" ||
    fail "a free fair lock: $(cat "$T/base.err")"
  base=$(( ($(cat "$T/base.out") - b0) / 1000000 ))
  t0=$(date +%s%N)
  expect_rc 0 unlock --force ff
  u=$(( ($(date +%s%N) - t0) / 1000000 )) # the unlock process, start to end
  wait "$FW" || fail "the fair waiter exited $?"
  woke=$(( ($(cat "$T/ffw.out") - t0) / 1000000 ))
  note "fair waiter ran $woke ms after unlock --force began (the unlock took $u ms, a free lock $base ms)"
  # (t0 is before the unlock process starts: its own time counts; a slow
  # build's steps are slower too)
  [ "$woke" -lt $((700 * ${DLOCK_TEST_TIMEOUT_MULT:-1} + u + base)) ] ||
    fail "the fair waiter ran $woke ms after unlock --force began (the unlock took $u ms, a free lock $base ms)"
  kill -TERM "$FH"
  wait "$FH"
  ;;

sem_named)
  # Permit holders are named (list, status), -v names the permit id, a
  # different --sem N warns that it changes the total.
  "$DL" -v --sem 2 sn -- sh -c 'echo "$DLOCK_OWNER" >'"$T/id"'; sleep 60' \
    2>"$T/sn.err" &
  SP=$!
  wait_until 20 file_has "$T/id" || fail "no permit holder"
  id=$(cat "$T/id")
  grep -q "acquired permit $id of 'sn' (--sem 2)" "$T/sn.err" ||
    fail "-v: $(cat "$T/sn.err")"
  ok=0
  for i in $(seq 1 100); do
    dl list --json sn >"$T/out" 2>"$T/last.err"
    json_check "$T/out" "L('sn')['holders'][0]['owner'] == '$id' and L('sn')['holders'][0]['pid'] == $SP and L('sn')['holders'][0]['since_ms']" && ok=1 && break
    sleep 0.1
  done
  [ $ok = 1 ] || fail "permit holder not named: $(cat "$T/out")"
  expect_rc 0 status --json sn
  json_check "$T/out" "d['permits'][0]['id'] == '$id' and d['permits'][0]['client']['pid'] == $SP" ||
    fail "status: $(cat "$T/out")"
  expect_rc 0 --sem 3 sn -- true
  grep -q "warning: --sem 3 changes the total of 'sn' from 2 to 3 permits" "$T/last.err" ||
    fail "no warning: $(cat "$T/last.err")"
  expect_rc 0 --sem 3 sn -- true
  ! grep -q warning "$T/last.err" || fail "warned again: $(cat "$T/last.err")"
  kill -TERM "$SP" # forwarded to its command, the permit given back
  wait "$SP"
  ;;

call_timeout)
  # A stalled server: connecting answers after one reply timeout with the
  # bound (--call-timeout 1), after the whole retry policy without it (0).
  "$DL" ct -- true || fail "no lock"
  # what a status costs here on a healthy server (process, connect): the
  # stalled one's bound adds it
  t0=$(date +%s%N)
  expect_rc 3 status ct # free: 3
  base=$(( ($(date +%s%N) - t0) / 1000000 ))
  kill -STOP "${REDIS_PIDS[0]}"
  t0=$(date +%s%N)
  expect_rc 69 --call-timeout 1 status ct
  one=$(( ($(date +%s%N) - t0) / 1000000 ))
  t0=$(date +%s%N)
  expect_rc 69 --call-timeout 0 status ct
  all=$(( ($(date +%s%N) - t0) / 1000000 ))
  kill -CONT "${REDIS_PIDS[0]}"
  note "stalled: --call-timeout 1 $one ms, --call-timeout 0 $all ms (healthy: $base ms)"
  [ "$one" -lt $((4000 + base)) ] || fail "--call-timeout 1 took $one ms (healthy: $base ms)"
  [ "$all" -gt "$one" ] && [ "$all" -ge 5500 ] || fail "--call-timeout 0 took $all ms"
  grep -q "cannot reach Redis at unix://$SOCK: " "$T/last.err" ||
    fail "message: $(cat "$T/last.err")"
  ;;

manpage_markup)
  # The man page renders without markdown's literal underscores (issue 39:
  # "[HOST]:_PORT_", "dlock_client:{_client id_}"): in man -l's text and
  # groff's, no word wrapped in underscores.
  page="$SRC/docs/dlock.1"
  MANWIDTH=200 man -l "$page" >"$T/man.txt" 2>"$T/man.err" </dev/null ||
    fail "man -l: $(cat "$T/man.err")"
  groff -man -Tutf8 -P-cbou "$page" >"$T/groff.txt" 2>"$T/groff.err" ||
    fail "groff: $(cat "$T/groff.err")"
  for f in "$T/man.txt" "$T/groff.txt"; do
    if grep -nE '(^|[^A-Za-z0-9_])_[A-Za-z][A-Za-z ]*_([^A-Za-z0-9_]|$)' "$f" >"$T/under"; then
      fail "literal underscores in $(basename "$f"): $(cat "$T/under")"
    fi
  done
  grep -q -- '--listen \[HOST\]:PORT' "$T/man.txt" || fail "exporter synopsis: $(grep -m1 'exporter' "$T/man.txt")"
  grep -q 'dlock_client:{<client id>}' "$T/man.txt" || fail "the info key's name"
  grep -q -- '--call-timeout SECONDS' "$T/man.txt" || fail "no --call-timeout"
  ;;

*)
  fail "unknown case"
  ;;
esac
if grep -l 'Sanitizer' "$T"/*.err >/dev/null 2>&1; then
  fail "sanitizer report: $(grep -l Sanitizer "$T"/*.err)"
fi
note "ok"
