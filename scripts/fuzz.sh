#!/usr/bin/env bash
# make fuzz: runs each libFuzzer target of tests/fuzz for SECONDS.
#   scripts/fuzz.sh BUILD_DIR SECONDS TARGET...
# Each target starts from its committed seeds (tests/fuzz/corpus/<t>/) plus
# what earlier runs found (BUILD_DIR/fuzz-corpus/<t>/, where new inputs go:
# the committed corpus is never written). A crash input lands in
# BUILD_DIR/fuzz-crashes/; after fixing its cause, copy it into
# tests/fuzz/corpus/<t>/ so `make test` replays it (fuzz.<t> cases).
# Exit 1 if any target found a crash, a leak or a timeout.
set -uo pipefail
build=$1 secs=$2
shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$build/fuzz-crashes"
status=0
summary=()
for t in "$@"; do
  bin="$build/tests/fuzz/fuzz_$t"
  work="$build/fuzz-corpus/$t"
  mkdir -p "$work"
  log="$build/fuzz-$t.log"
  echo "fuzz: $t for ${secs}s (log $log)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin" -max_total_time="$secs" -timeout=25 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$build/fuzz-crashes/$t-" \
      "$work" "$src/tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  if [ $rc -eq 0 ]; then
    summary+=("$t: ok, ${runs:-?} inputs, ${cov:-cov: ?}")
  else
    status=1
    summary+=("$t: FAILED (exit $rc): $(grep -m1 -E 'ERROR|SUMMARY' "$log")")
    ls "$build/fuzz-crashes/$t-"* 2>/dev/null | sed 's/^/  input: /'
  fi
done
printf 'fuzz summary (%ss per target):\n' "$secs"
printf '  %s\n' "${summary[@]}"
exit $status
