#!/usr/bin/env bash
# run_peers.sh -- dlock side by side with other Redis lock libraries on the
# same private redis-server (issue 4's bar). One markdown table, then one
# JSON line.
#
#   tools/bench/peers/run_peers.sh [--workers N] [--secs S] [--rounds R]
#                                  [--bench EXE] [--base-bench EXE]
#   make bench-peers PEERS_FLAGS="--secs 5"
#
# Every library runs the contended scenario of dlock-bench: N processes
# (default 8) on ONE lock, a non-atomic GET+SET of a counter inside, S
# seconds (default 5), R rounds (default 3) in rotating order; each
# library's row is its median round (the machine is shared and noisy).
# Peers:
#   - dlock itself (dlock-bench --only contended with the same N and S);
#     --base-bench EXE adds a second dlock row from another build (e.g. the
#     commit before a change: before and after from the same run);
#   - redis-py's Lock (python3-redis, apt-get installed if missing),
#     defaults, blocking_timeout=1, sleep 1 ms;
#   - node redlock and redis-semaphore (npm, installed into a temp dir; set
#     DLOCK_PEERS_NPM_DIR to reuse one), defaults and tuned retry delays.
# A peer whose runtime or package is missing is skipped with a note.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
workers=8
secs=5
rounds=3
bench=""
base_bench=""
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --base-bench) base_bench=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "run_peers.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -z "$bench" ]; then
  for c in "$root/build/tools/bench/dlock-bench" "$(command -v dlock-bench || true)"; do
    if [ -n "$c" ] && [ -x "$c" ]; then bench=$c; break; fi
  done
fi
[ -n "$bench" ] && [ -x "$bench" ] || { echo "run_peers.sh: dlock-bench not built (make build, or --bench EXE)" >&2; exit 2; }
command -v redis-server >/dev/null || { echo "run_peers.sh: redis-server not found (scripts/install-deps.sh)" >&2; exit 2; }

tmp=$(mktemp -d /tmp/dlock-peers-XXXXXX)
rpid=""
cleanup() {
  if [ -n "$rpid" ]; then kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# The private server: unix socket only, no persistence.
sock="$tmp/redis.sock"
redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 --save "" \
  --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" &
rpid=$!
for _ in $(seq 100); do
  redis-cli -s "$sock" PING >/dev/null 2>&1 && break
  sleep 0.05
done
redis-cli -s "$sock" PING >/dev/null || { echo "run_peers.sh: redis-server did not start" >&2; cat "$tmp/redis.log" >&2; exit 2; }
rver=$(redis-cli -s "$sock" INFO server | sed -n 's/^redis_version:\([^\r]*\).*/\1/p')

# python: the first interpreter that has the redis module; on Debian, install
# python3-redis when it is missing (DLOCK_PEERS_INSTALL=0 to skip that).
py=""; pyver=""
if [ "${DLOCK_PEERS_INSTALL:-1}" = 1 ] && ! /usr/bin/python3 -c 'import redis' 2>/dev/null \
   && command -v apt-get >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "run_peers.sh: installing python3-redis" >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-redis >/dev/null 2>&1 \
    || echo "run_peers.sh: could not install python3-redis" >&2
fi
for c in python3 /usr/bin/python3; do
  if command -v "$c" >/dev/null && v=$("$c" -c 'import redis; print(redis.__version__)' 2>/dev/null); then
    py=$(command -v "$c"); pyver=$v; break
  fi
done

# node: redlock + redis-semaphore + ioredis into a temp (or given) dir.
node_dir=""; node_note=""
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  node_note="node peers skipped: node/npm not installed"
elif ! npm view redlock version >/dev/null 2>&1; then
  node_note="node peers skipped: the npm registry is not reachable"
else
  node_dir=${DLOCK_PEERS_NPM_DIR:-$tmp/npm}
  mkdir -p "$node_dir"
  [ -f "$node_dir/package.json" ] || echo '{"name":"dlock-peers","private":true}' >"$node_dir/package.json"
  if ! (cd "$node_dir" && npm install --no-audit --no-fund --loglevel=error \
        redlock@4 redis-semaphore@5 ioredis@5 >"$tmp/npm.log" 2>&1); then
    node_note="node peers skipped: npm install failed ($(tail -1 "$tmp/npm.log"))"
    node_dir=""
  fi
fi

echo "# dlock peers: redis-server $rver (private, unix socket), $(nproc) CPUs, $workers processes, $secs s per run, $rounds rounds"
echo
python3 "$here/peers.py" run --sock "$sock" --workers "$workers" --secs "$secs" --rounds "$rounds" \
  --bench "$bench" --node-dir "$node_dir" --node-note "$node_note" \
  --python "$py" --pyver "$pyver" --base-bench "$base_bench" \
  --base-label "$(basename "$(dirname "$(dirname "$(dirname "$(dirname "${base_bench:-x/x/x/x/x}")")")")")"
