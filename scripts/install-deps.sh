#!/usr/bin/env bash
# Installs what a profile needs on Debian 12, and only what is missing.
# Idempotent; needs root (or sudo) only when something is missing.
#   install-deps.sh build   building the library and tools, and `make demo`
#                             (libcurl and json-c: the etcd store's gateway
#                             client; etcd-server and etcd-client: the
#                             demo's failover scenario runs a 3-member etcd
#                             cluster, the tests start private members and
#                             run `etcdctl lock`)
#   install-deps.sh rig     + what `make rig` runs: nginx, ab (apache2-utils),
#                             python3
#   install-deps.sh test    + what `make test` uses (man, groff, python3, the
#                             rig's parts, chromium for the page test, ip for
#                             the partition test, libfaketime, gdb: a test
#                             that hangs prints its stacks,
#                             python3-prometheus-client: the exporter's
#                             output is parsed with it, liblua5.1-0-dev: the
#                             simulator's Redis model runs the scripts in
#                             Lua 5.1, the version Redis embeds; strace:
#                             cli.lost_before_start stalls one syscall)
#   install-deps.sh dev     + developer tools: valgrind, clang-format,
#                             clang-tidy, stress-ng, clang (make fuzz) (the default)
set -euo pipefail
profile=${1:-dev}
build=(build-essential cmake pkg-config libhiredis-dev libssl-dev openssl
       libyaml-dev libevent-dev libuv1-dev redis-server redis-tools
       libcurl4-openssl-dev libjson-c-dev etcd-server etcd-client)
rig=(nginx apache2-utils python3)
test=(man-db groff-base chromium iproute2 libfaketime gdb
      python3-prometheus-client liblua5.1-0-dev strace)
dev=(valgrind clang-format clang-tidy stress-ng clang)
case "$profile" in
  build) pkgs=("${build[@]}") ;;
  rig) pkgs=("${build[@]}" "${rig[@]}") ;;
  test) pkgs=("${build[@]}" "${rig[@]}" "${test[@]}") ;;
  dev) pkgs=("${build[@]}" "${rig[@]}" "${test[@]}" "${dev[@]}") ;;
  *) echo "usage: install-deps.sh [build|rig|test|dev]" >&2; exit 64 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's package starts a system redis-server on 6379 (nginx's one on
# port 80, etcd-server's on 2379, where services start); the tests and the
# rig never use them (they start their own on private sockets and free
# ports), so leave them alone.
