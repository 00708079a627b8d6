#!/usr/bin/env bash
# run_consumer.sh CONSUMER [PREFIX...] -- runs a tests/abi/consumer.c build
# (under PREFIX, e.g. valgrind, when given) against a
# private redis-server (unix socket in a fresh temp dir, killed with the
# test: trap + parent-death signal). Registered by tests/cmake/abi.cmake.
set -u
CONSUMER=$1
shift
T=$(mktemp -d "${TMPDIR:-/tmp}/abitest.XXXXXX")
REDIS_PID=
cleanup() {
  [ -n "$REDIS_PID" ] && kill -9 "$REDIS_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  [ -s "$T/redis.log" ] && { echo "--- redis.log" >&2; tail -20 "$T/redis.log" >&2; }
  exit 1
}
setpriv --pdeathsig KILL redis-server --port 0 --unixsocket "$T/redis.sock" \
  --unixsocketperm 700 --save '' --appendonly no --dir "$T" \
  --logfile "$T/redis.log" &
REDIS_PID=$!
up=0
for _ in $(seq 1 200); do
  redis-cli -s "$T/redis.sock" ping 2>/dev/null | grep -q PONG && { up=1; break; }
  sleep 0.025
done
[ "$up" = 1 ] || fail "redis-server did not start"
# What the loader resolves: the library of this tree (or a refusal).
ldd "$CONSUMER" | grep 'libdlock' || fail "$CONSUMER is not linked with libdlock"
timeout 60 "$@" "$CONSUMER" "unix://$T/redis.sock" "unix://$T/nobody.sock" ||
  fail "$(basename "$CONSUMER") exited with $?"
