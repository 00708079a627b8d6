#!/usr/bin/env bash
# list-cost.sh DLOCK [KEYS]: what `dlock list` costs on a large keyspace
# (docs/operations.md quotes its figures). Starts a private redis-server,
# fills it with KEYS (default 1000000) plain string keys and 100 held
# locks (pipelined: redis-cli --pipe), then runs `dlock list` while a probe
# PINGs the server every 10 ms and reports the worst PING it saw, and
# prints the server's own count of the commands and CPU the scan cost
# (INFO commandstats).
set -eu
DL=$1
N=${2:-1000000}
T=$(mktemp -d)
trap 'kill $(cat $T/pid) 2>/dev/null; rm -rf $T' EXIT
redis-server --port 0 --unixsocket $T/s --save '' --appendonly no \
  --daemonize yes --pidfile $T/pid --logfile $T/log
for i in $(seq 1 100); do redis-cli -s $T/s ping >/dev/null 2>&1 && break; sleep 0.05; done
python3 - "$N" <<'PY' | redis-cli -s $T/s --pipe >/dev/null
import sys
n = int(sys.argv[1]); out = sys.stdout
def cmd(*a):
    out.write("*%d\r\n" % len(a))
    for x in a:
        out.write("$%d\r\n%s\r\n" % (len(x.encode()), x))
for i in range(n):
    cmd("SET", "plain:%d" % i, "value-%d" % i)
for i in range(100):  # 100 held mutexes, Redisson layout, with a 10 min TTL
    cmd("HSET", "lock:%d" % i, "0b1e1c7e-0000-4000-8000-%012d:1" % i, "1")
    cmd("PEXPIRE", "lock:%d" % i, "600000")
PY
redis-cli -s $T/s config resetstat >/dev/null
PROBE_PY='
import socket, sys, time, signal
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
worst, n, stop = 0.0, 0, []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
while not stop:
    t = time.monotonic(); s.sendall(b"PING\r\n"); s.recv(16)
    worst = max(worst, time.monotonic() - t); n += 1
    time.sleep(0.01)
print("%d PINGs, the slowest %.2f ms" % (n, worst * 1000))
'
python3 -c "$PROBE_PY" $T/s > $T/idle &
PROBE=$!
sleep 3
kill -INT $PROBE; wait $PROBE || true
python3 -c "$PROBE_PY" $T/s > $T/probe &
PROBE=$!
sleep 0.3
t0=$(date +%s%N)
DLOCK_URL=unix://$T/s "$DL" list > $T/out
t1=$(date +%s%N)
sleep 0.3
kill -INT $PROBE; wait $PROBE || true
echo "keys: $(redis-cli -s $T/s dbsize); dlock list: $(( (t1 - t0) / 1000000 )) ms; $(tail -1 $T/out)"
echo "probe, 3 s idle before: $(cat $T/idle)"
echo "probe, during dlock list: $(cat $T/probe)"
redis-cli -s $T/s info commandstats | grep -E 'cmdstat_(scan|type|hlen|hgetall|pttl|lrange|zrange|exists|getrange|pubsub)' | tr -d '\r'
