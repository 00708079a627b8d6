#!/usr/bin/env bash
# Installs what building, testing and the demo need on Debian 12, and only
# what is missing. Idempotent; needs root (or sudo) only when something is
# missing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libhiredis-dev libssl-dev openssl
      libyaml-dev redis-server redis-tools valgrind clang-format clang-tidy
      man-db groff-base python3 stress-ng)
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
# Debian's package starts a system redis-server on 6379; the tests never use
# it (they start their own on private sockets), so leave it alone.
