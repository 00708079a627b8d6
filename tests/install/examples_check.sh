#!/usr/bin/env bash
# examples_check.sh BUILD_DIR SOURCE_DIR -- examples/ is a consumer project
# of the INSTALLED package (issue 39: demo_two_procs included an internal
# header): this build installed as `make install DESTDIR=<stage>` does,
# then examples/ configured and built on its own with find_package(dlock) against the
# staged prefix, each example once more through pkg-config, and the
# programs run: basic and demo_two_procs against a private redis-server
# (unix socket in the temp dir).
set -euo pipefail
build_dir=$1
src_dir=$2
tmp=$(mktemp -d)
redis_pid=
cleanup() {
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
stage=$tmp/stage
prefix=/opt/dlock-ex # any prefix: the stage holds it
# what `make install DESTDIR=... PREFIX=...` runs (Makefile), on this build
DESTDIR="$stage" cmake --install "$build_dir" --prefix "$prefix" \
  >"$tmp/install.log" 2>&1 || {
  echo "install DESTDIR=$stage failed:"; tail -20 "$tmp/install.log"; exit 1; }
root=$stage$prefix
libdir=$(ls -d "$root"/lib* | head -1)
[ -f "$root/include/dlock/admin.h" ] || { echo "dlock/admin.h not installed"; exit 1; }
# 1. find_package: examples/ as a project of its own.
cmake -S "$src_dir/examples" -B "$tmp/ex" -DCMAKE_PREFIX_PATH="$root" \
  -DCMAKE_BUILD_RPATH="$libdir" >"$tmp/cmake.log" 2>&1 || {
  echo "examples/ does not configure against the installed package:"
  cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/ex" >"$tmp/build.log" 2>&1 || {
  echo "examples/ does not build against the installed package:"
  tail -30 "$tmp/build.log"; exit 1; }
grep -q "$build_dir" "$tmp/ex/CMakeCache.txt" &&
  { echo "examples/ found the build tree, not the installed package"; exit 1; }
echo "examples/ built with find_package(dlock) from $root: ok"
# 2. pkg-config, each example on its own.
export PKG_CONFIG_PATH="$libdir/pkgconfig"
for ex in basic demo_two_procs; do
  cc -std=c11 -Wall -Wextra -Werror -o "$tmp/${ex}_pc" "$src_dir/examples/$ex.c" \
    $(pkg-config --cflags --libs dlock) -Wl,-rpath,"$libdir"
done
if pkg-config --exists libevent; then
  cc -std=c11 -Wall -Werror -o "$tmp/async_pc" "$src_dir/examples/async_libevent.c" \
    $(pkg-config --cflags --libs dlock libevent) -Wl,-rpath,"$libdir"
fi
echo "examples built with pkg-config: ok"
# 3. They run, against the installed library. A sanitizer build's library
# needs the sanitizer's runtime first in an uninstrumented program: loaded
# after libc (as a dependency of libdlock), TSan's runtime fails the
# program's first allocations ('connect: out of memory' under make
# test-tsan). Only the examples get it (ldd segfaults under TSan's).
preload=
if nm -D "$libdir"/libdlock.so.* 2>/dev/null | grep ' __asan_init' >/dev/null; then
  preload=$(cc -print-file-name=libasan.so)
  export ASAN_OPTIONS=detect_leaks=0
elif nm -D "$libdir"/libdlock.so.* 2>/dev/null | grep ' __tsan_' >/dev/null; then
  preload=$(cc -print-file-name=libtsan.so)
fi
run() { LD_PRELOAD=$preload "$@"; }
redis-server --port 0 --unixsocket "$tmp/r.sock" --save '' --appendonly no \
  --dir "$tmp" --logfile "$tmp/redis.log" &
redis_pid=$!
for i in $(seq 1 200); do [ -S "$tmp/r.sock" ] && break; sleep 0.025; done
for b in "$tmp/ex/example_basic" "$tmp/basic_pc"; do
  out=$(run "$b" "unix://$tmp/r.sock" 2>&1) || { echo "$b failed: $out"; exit 1; }
  grep -q "result: success" <<<"$out" || { echo "$b: $out"; exit 1; }
  ldd "$b" | grep -F "$libdir/libdlock.so" >/dev/null || {
    echo "$b does not load the installed library:"; ldd "$b"; exit 1; }
done
for d in "$tmp/ex/demo_two_procs" "$tmp/demo_two_procs_pc"; do
  out=$(run "$d" 2>&1) || { echo "$d failed: $out"; exit 1; }
  grep -q "never held the lock together" <<<"$out" || { echo "$d: $out"; exit 1; }
done
echo "examples run against the installed library: ok"
