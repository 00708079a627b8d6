#!/usr/bin/env bash
# etcd_test.sh DLOCK_BINARY SOURCE_DIR CASE -- the dlock CLI, unchanged,
# with -u etcd://... (the etcd store, docs/etcd.md) against a private etcd
# member (free loopback ports, a fresh temp dir, killed with the test).
# Registered per case by tests/cmake/cli_etcd.cmake as cli.<case>; exits 77
# (skipped) when etcd is not installed. Every wait is a bounded loop.
set -u
DL=$1
SRC=$2
CASE=$3
command -v etcd >/dev/null || { echo "SKIP: etcd is not installed (scripts/install-deps.sh)"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/clietcd.XXXXXX")
unset DLOCK_NAME DLOCK_OWNER DLOCK_TOKEN DLOCK_CONFIG
ETCD_PID=

cleanup() {
  local p
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  [ -n "$ETCD_PID" ] && kill -9 "$ETCD_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$CASE]: $*" >&2
  for f in "$T"/*.err "$T"/*.out; do
    [ -s "$f" ] && { echo "--- $f" >&2; cat "$f" >&2; }
  done
  [ -f "$T/etcd.log" ] && { echo "--- etcd.log (tail)" >&2; tail -20 "$T/etcd.log" >&2; }
  exit 1
}
note() { echo "[$CASE] $*"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

CP=$(free_port)
PP=$(free_port)
setpriv --pdeathsig KILL etcd --name t --data-dir "$T/data" \
  --listen-client-urls "http://127.0.0.1:$CP" \
  --advertise-client-urls "http://127.0.0.1:$CP" \
  --listen-peer-urls "http://127.0.0.1:$PP" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PP" \
  --initial-cluster "t=http://127.0.0.1:$PP" --unsafe-no-fsync \
  --logger zap >"$T/etcd.log" 2>&1 &
ETCD_PID=$!
export DLOCK_URL="etcd://127.0.0.1:$CP"
up() { curl -s -m 1 "http://127.0.0.1:$CP/v3/kv/range" -d '{"key":"AA=="}' | grep -q header; }
for i in $(seq 1 400); do up && break; sleep 0.05; done
up || fail "etcd did not start"

wait_until() {
  local limit=$1 i
  shift
  for i in $(seq 1 $((limit * 50))); do
    "$@" && return 0
    sleep 0.02
  done
  return 1
}
file_has() { [ -s "$1" ]; }

case "$CASE" in
etcd_run)
  # run, -n while held (exit 1, the conflict code), -w SECS that times out,
  # and a waiter that runs once the holder's command ended
  "$DL" job -- sh -c 'echo ran' >"$T/a.out" 2>"$T/a.err" || fail "run: $?"
  grep -q ran "$T/a.out" || fail "the command did not run"
  "$DL" job -- sh -c "touch $T/held; sleep 3" 2>"$T/h.err" &
  wait_until 10 test -e "$T/held" || fail "holder did not start"
  "$DL" -n job -- echo nope >"$T/n.out" 2>"$T/n.err"
  [ $? = 1 ] || fail "-n while held: want exit 1"
  t0=$(now_ms)
  "$DL" -w 0.5 job -- echo nope 2>"$T/w.err"
  [ $? = 1 ] || fail "-w 0.5 while held: want exit 1"
  [ $(($(now_ms) - t0)) -ge 450 ] || fail "-w 0.5 gave up too early"
  "$DL" -w 10 job -- sh -c 'echo after' >"$T/b.out" 2>"$T/b.err" || fail "waiter: $?"
  grep -q after "$T/b.out" || fail "the waiter's command did not run"
  ;;
etcd_fence)
  "$DL" --fence job -- sh -c 'echo $DLOCK_TOKEN' >"$T/t1.out" 2>"$T/t1.err" || fail "fence 1"
  "$DL" --fence job -- sh -c 'echo $DLOCK_TOKEN' >"$T/t2.out" 2>"$T/t2.err" || fail "fence 2"
  a=$(cat "$T/t1.out")
  b=$(cat "$T/t2.out")
  [ -n "$a" ] && [ "$b" -gt "$a" ] || fail "tokens $a then $b: want increasing"
  note "tokens $a < $b (create revisions)"
  ;;
etcd_sem)
  # --sem 2: two run at once, a third with -n is refused
  "$DL" --sem 2 pool -- sh -c "touch $T/s1; sleep 3" 2>"$T/s1.err" &
  S1=$!
  "$DL" --sem 2 pool -- sh -c "touch $T/s2; sleep 3" 2>"$T/s2.err" &
  S2=$!
  wait_until 10 test -e "$T/s1" || fail "first holder"
  wait_until 10 test -e "$T/s2" || fail "second holder"
  "$DL" --sem 2 -n pool -- echo third 2>"$T/s3.err"
  [ $? = 1 ] || fail "a third holder of --sem 2"
  wait "$S1" "$S2"
  "$DL" --sem 2 -n pool -- echo third >"$T/s4.out" 2>"$T/s4.err" || fail "after: $?"
  ;;
etcd_admin)
  # status (0 held, 3 free), list, unlock --force (the holder's command
  # gets SIGTERM, its dlock exits 75)
  "$DL" status job >"$T/st0.out" 2>"$T/st0.err"
  [ $? = 3 ] || fail "status of a free lock: want 3"
  "$DL" job -- sh -c "touch $T/held; sleep 30" >"$T/h.out" 2>"$T/h.err" &
  H=$!
  wait_until 10 test -e "$T/held" || fail "holder did not start"
  "$DL" -w 30 job -- true 2>"$T/w.err" &
  W=$!
  sleep 0.5
  "$DL" status job >"$T/st1.out" 2>"$T/st1.err" || fail "status of a held lock: $?"
  grep -q "held" "$T/st1.out" || fail "status does not say held"
  "$DL" status --json job >"$T/st2.out" 2>"$T/st2.err" || fail "status --json"
  grep -q '"locked":true' "$T/st2.out" || fail "status --json: not locked"
  grep -q '"waiters":\[{' "$T/st2.out" || fail "status --json: no waiter"
  "$DL" list >"$T/l.out" 2>"$T/l.err" || fail "list: $?"
  grep -q "^job " "$T/l.out" || fail "list does not show job"
  "$DL" list --json >"$T/l2.out" 2>"$T/l2.err" || fail "list --json: $?"
  grep -q '"name":"job"' "$T/l2.out" || fail "list --json does not show job"
  "$DL" unlock --force job >"$T/f.out" 2>"$T/f.err" || fail "unlock --force: $?"
  wait "$H"
  rc=$?
  [ "$rc" = 75 ] || fail "the forced holder exited $rc, want 75 (lock lost)"
  wait "$W" || fail "the waiter: $?"
  "$DL" status job >/dev/null 2>&1
  [ $? = 3 ] || fail "free after the waiter: want status 3"
  ;;
etcd_bad)
  # clear codes: unreachable (69), not an etcd (70 or 69 as the protocol
  # error maps), a malformed URL (64)
  P=$(free_port)
  "$DL" -u "etcd://127.0.0.1:$P" job -- true 2>"$T/u.err"
  [ $? = 69 ] || fail "unreachable: want 69"
  grep -q "127.0.0.1:$P" "$T/u.err" || fail "the message does not name the endpoint"
  "$DL" -u "etcd://127.0.0.1:$PP" job -- true 2>"$T/p.err"
  rc=$?
  [ "$rc" = 70 ] || fail "the peer port: want 70, got $rc"
  grep -q "gateway" "$T/p.err" || fail "the message does not say why"
  "$DL" -u "etcd://h:1,,h:2" job -- true 2>"$T/m.err"
  [ $? = 64 ] || fail "malformed: want 64"
  ;;
*)
  fail "unknown case"
  ;;
esac
note ok
