#!/usr/bin/env bash
# sem_test.sh DLOCK_BINARY SOURCE_DIR CASE -- "dlock --sem N" (expirable
# permits, docs/permits.md) against a private redis-server (unix socket in a
# fresh temp dir, killed with the test). Registered per case by
# tests/cmake/cli_sem.cmake as cli.<case>. Every wait is a bounded loop.
set -u
DL=$1
SRC=$2
CASE=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/clisem.XXXXXX")
SOCK=$T/redis.sock
export DLOCK_URL="unix://$SOCK"
unset DLOCK_NAME DLOCK_OWNER DLOCK_TOKEN
REDIS_PID=

cleanup() {
  local p
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  [ -n "$REDIS_PID" ] && kill -9 "$REDIS_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$CASE]: $*" >&2
  for f in "$T"/*.err; do
    [ -s "$f" ] && { echo "--- $f" >&2; cat "$f" >&2; }
  done
  exit 1
}
note() { echo "[$CASE] $*"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
R() { redis-cli -s "$SOCK" "$@"; }

setpriv --pdeathsig KILL redis-server --port 0 --unixsocket "$SOCK" \
  --unixsocketperm 700 --save '' --appendonly no --dir "$T" \
  --logfile "$T/redis.log" &
REDIS_PID=$!
for i in $(seq 1 200); do
  R ping 2>/dev/null | grep -q PONG && break
  sleep 0.025
done
R ping 2>/dev/null | grep -q PONG || fail "redis-server did not start"

# wait_until SECONDS COMMAND...: polls every 20 ms.
wait_until() {
  local limit=$1 i
  shift
  for i in $(seq 1 $((limit * 50))); do
    "$@" && return 0
    sleep 0.02
  done
  return 1
}
taken_is() { [ "$(R zcard "{$1}:timeout")" = "$2" ]; }
file_has() { [ -s "$1" ]; }

case "$CASE" in
sem_cap)
  # 10 contenders, --sem 3: never 4 commands at once, all 10 run. Each
  # command marks itself running (a file), counts the running ones, holds
  # ~0.6 s, unmarks itself: a count above 3 means 4 ran at once.
  mkdir "$T/run"
  cmd='touch '"$T"'/run/$$; ls '"$T"'/run | wc -l >> '"$T"'/counts; sleep 0.6; rm '"$T"'/run/$$; echo done >> '"$T"'/done'
  pids=()
  for i in $(seq 1 10); do
    timeout -k 2 60 "$DL" --sem 3 cap -- sh -c "$cmd" 2>"$T/dl$i.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || fail "a dlock --sem exited $?"
  done
  [ "$(wc -l <"$T/done")" = 10 ] || fail "$(wc -l <"$T/done") of 10 commands ran"
  max=$(sort -n "$T/counts" | tail -1)
  [ "$max" -le 3 ] || fail "$max commands ran at once (--sem 3)"
  [ "$max" -ge 2 ] || fail "never more than one at once: $(tr '\n' ' ' <"$T/counts")"
  [ "$(R get cap)" = 3 ] && taken_is cap 0 || fail "permits left: $(R get cap), taken $(R zcard '{cap}:timeout')"
  note "at most $max at once; all 10 ran"
  ;;

sem_kill9)
  # A SIGKILLed dlock --sem leaves its permit behind; it comes back after
  # its watchdog lease (2 s), and a waiting dlock gets it.
  "$DL" --sem 1 --watchdog 2 k9 -- sh -c "echo \$\$ > $T/c.ready; exec sleep 20" 2>"$T/holder.err" &
  P=$!
  wait_until 5 file_has "$T/c.ready" || fail "command did not start"
  taken_is k9 1 || fail "no permit taken"
  # Renewed past its lease while dlock lives.
  sleep 2.5
  taken_is k9 1 || fail "the watchdog did not keep the permit"
  timeout -k 2 30 "$DL" -n --sem 1 k9 -- true && fail "a second holder ran"
  t0=$(now_ms)
  kill -9 "$P"
  timeout -k 2 30 "$DL" --sem 1 -w 10 k9 -- touch "$T/second" 2>"$T/second.err" ||
    fail "the permit did not come back"
  el=$(($(now_ms) - t0))
  [ -e "$T/second" ] || fail "second command did not run"
  [ "$el" -lt 6000 ] || fail "permit back after $el ms (lease 2 s)"
  [ "$(R get k9)" = 1 ] && taken_is k9 0 || fail "count $(R get k9), taken $(R zcard '{k9}:timeout')"
  note "permit back $el ms after kill -9"
  ;;

sem_redis_gone)
  # Redis dies under a running dlock --sem: the permit's renewals fail until
  # its watchdog lease (1 s) may have run out, and then the command gets
  # SIGTERM and dlock exits 75 saying why.
  "$DL" --sem 1 --watchdog 1 --kill-after 1 rg -- sh -c \
    "trap 'echo TERM > $T/c.got; exit 0' TERM; echo \$\$ > $T/c.ready; i=0; while [ \$i -lt 400 ]; do sleep 0.05; i=\$((i+1)); done" \
    2>"$T/dl.err" &
  P=$!
  wait_until 5 file_has "$T/c.ready" || fail "command did not start"
  t0=$(now_ms)
  kill -9 "$REDIS_PID"
  wait_until 10 file_has "$T/c.got" || fail "command not sent SIGTERM"
  el=$(($(now_ms) - t0))
  wait "$P"
  rc=$?
  [ "$rc" = 75 ] || fail "dlock exited $rc, expected 75"
  [ "$el" -lt 5000 ] || fail "SIGTERM $el ms after Redis died (lease 1 s)"
  grep -q "lost" "$T/dl.err" || fail "message: $(cat "$T/dl.err")"
  note "SIGTERM $el ms after Redis died: $(grep lost "$T/dl.err")"
  ;;

sem_status)
  "$DL" --sem 2 st -- sh -c "echo \$DLOCK_OWNER > $T/owner; exec sleep 20" 2>"$T/holder.err" &
  P=$!
  wait_until 5 file_has "$T/owner" || fail "command did not start"
  id=$(cat "$T/owner")
  [ "${#id}" = 32 ] || fail "DLOCK_OWNER '$id' is not a permit id"
  timeout 10 "$DL" status st >"$T/out" 2>"$T/status.err"
  rc=$?
  [ "$rc" = 0 ] || fail "status exited $rc"
  grep -q "permits 'st': 1 available, 1 taken" "$T/out" || fail "status: $(cat "$T/out")"
  grep -q "permit $id  expires in" "$T/out" || fail "status: $(cat "$T/out")"
  timeout 10 "$DL" status --json st >"$T/json" || fail "status --json"
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["kind"] == "permits" and d["available"] == 1, d
assert [p["id"] for p in d["permits"]] == [sys.argv[2]], d' "$T/json" "$id" ||
    fail "json: $(cat "$T/json")"
  kill -TERM "$P"
  wait "$P"
  timeout 10 "$DL" status st >"$T/out"
  rc=$?
  [ "$rc" = 3 ] || fail "status of a free semaphore exited $rc"
  grep -q "2 available, 0 taken" "$T/out" || fail "status: $(cat "$T/out")"
  # Usage errors.
  for bad in "--sem 0" "--sem x" "--sem 2 --fair" "--sem 2 -s"; do
    # shellcheck disable=SC2086
    timeout 10 "$DL" $bad st -- true 2>"$T/bad.err"
    rc=$?
    [ "$rc" = 64 ] || fail "dlock $bad exited $rc: $(cat "$T/bad.err")"
  done
  ;;

*)
  fail "unknown case $CASE"
  ;;
esac
exit 0
