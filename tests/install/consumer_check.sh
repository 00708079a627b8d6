#!/usr/bin/env bash
# Installs the built tree into a temp prefix, then builds a small program
# against the INSTALLED headers and library twice: through pkg-config and
# through CMake's find_package(dlock). Catches broken install rules, .pc
# files and exported targets.
set -euo pipefail
build_dir=$1
src_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build_dir" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib* | head -1)
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# 1. pkg-config
cc -std=c11 -Wall -Werror -o "$tmp/basic_pc" "$src_dir/examples/basic.c" \
  $(pkg-config --cflags --libs dlock) -Wl,-rpath,"$libdir"
"$tmp/basic_pc" unix:///nonexistent/socket >/dev/null 2>&1 && {
  echo "expected a connection failure"; exit 1; } || true
echo "pkg-config consumer: ok ($(pkg-config --modversion dlock))"
# Every installed tool starts with a clean environment: no LD_LIBRARY_PATH,
# the library found through the tools' $ORIGIN-relative runtime path.
for t in "dlock --version" "dlock-seckill --version" "dlock-bench --help"; do
  bin=${t%% *}
  [ -x "$tmp/prefix/bin/$bin" ] || { echo "$bin not installed"; exit 1; }
  env -i PATH=/usr/bin:/bin "$tmp/prefix/bin/$bin" ${t#* } >"$tmp/out" 2>&1 || {
    echo "installed $bin does not run:"; cat "$tmp/out"; exit 1; }
done
echo "installed tools run from $tmp/prefix: ok"
# The version and ABI generation come from include/dlock/version.h only.
vh="$src_dir/include/dlock/version.h"
num() { sed -n "s/^#define DLOCK_$1 \([0-9]*\)$/\1/p" "$vh"; }
ver="$(num VERSION_MAJOR).$(num VERSION_MINOR).$(num VERSION_PATCH)"
so="libdlock.so.$(num SOVERSION)"
[ "$(pkg-config --modversion dlock)" = "$ver" ] || {
  echo "dlock.pc says $(pkg-config --modversion dlock), version.h $ver"; exit 1; }
[ -e "$libdir/$so" ] || { echo "$so not installed in $libdir"; exit 1; }
dyn=$(readelf -d "$libdir/$so")
grep -qF "Library soname: [$so]" <<<"$dyn" || {
  echo "installed SONAME is not $so:"; grep SONAME <<<"$dyn"; exit 1; }
deps=$(ldd "$tmp/basic_pc")
grep -qF "$so => $libdir/" <<<"$deps" || {
  echo "basic_pc does not load $so from $libdir:"; echo "$deps"; exit 1; }
echo "installed $so (dlock $ver): ok"
# 2. find_package
mkdir -p "$tmp/proj"
cat >"$tmp/proj/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.18)
project(consumer C)
find_package(dlock ${ver%.*} REQUIRED)
add_executable(basic \${SRC}/examples/basic.c)
target_link_libraries(basic PRIVATE dlock::dlock)
CM
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DSRC="$src_dir" >/dev/null
cmake --build "$tmp/proj/build" >/dev/null
echo "find_package consumer: ok"
# 3. While the major version is 0, a minor release may break the API
# (docs/abi.md): the CMake package must refuse a request for the previous one.
if [ "$(num VERSION_MAJOR)" = 0 ] && [ "$(num VERSION_MINOR)" -gt 0 ]; then
  prev="0.$(($(num VERSION_MINOR) - 1))"
  mkdir -p "$tmp/old"
  sed "s/find_package(dlock [0-9.]* REQUIRED)/find_package(dlock $prev REQUIRED)/" \
    "$tmp/proj/CMakeLists.txt" >"$tmp/old/CMakeLists.txt"
  if cmake -S "$tmp/old" -B "$tmp/old/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
    -DSRC="$src_dir" >/dev/null 2>&1; then
    echo "find_package(dlock $prev) accepted dlock $ver"; exit 1
  fi
  echo "find_package(dlock $prev) refused: ok"
fi
