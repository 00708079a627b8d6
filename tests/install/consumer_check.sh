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
# 2. find_package
mkdir -p "$tmp/proj"
cat >"$tmp/proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(consumer C)
find_package(dlock 0.1 REQUIRED)
add_executable(basic ${SRC}/examples/basic.c)
target_link_libraries(basic PRIVATE dlock::dlock)
CM
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DSRC="$src_dir" >/dev/null
cmake --build "$tmp/proj/build" >/dev/null
echo "find_package consumer: ok"
