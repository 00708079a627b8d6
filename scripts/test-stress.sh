#!/usr/bin/env bash
# test-stress.sh [RUNS] -- the whole suite (`make test`: plain and ASan
# builds) RUNS times in a row (default 3) while `stress-ng --cpu 4` keeps
# every core busy, as CI's loaded 2-core machine does. A test that fails
# here is flaky: find the race or the bound that assumed a quiet machine.
# Prints one line per run and a summary; exits 1 if any run failed.
set -uo pipefail
runs=${1:-3}
case "$runs" in '' | *[!0-9]*) echo "test-stress: RUNS must be a number" >&2; exit 2 ;; esac
command -v stress-ng >/dev/null || { echo "test-stress: stress-ng is missing (make deps)" >&2; exit 2; }
log_dir=$(mktemp -d /tmp/dlock-stress-XXXXXX)
stress-ng --cpu 4 --timeout 0 --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null' EXIT INT TERM
failed=0
for i in $(seq 1 "$runs"); do
  t0=$(date +%s)
  if make --no-print-directory test >"$log_dir/run$i.log" 2>&1; then
    verdict=passed
  else
    verdict=FAILED
    failed=$((failed + 1))
  fi
  sum=$(grep -E "tests passed" "$log_dir/run$i.log" | tr '\n' ';' | sed 's/;$//')
  echo "test-stress: run $i/$runs $verdict in $(($(date +%s) - t0)) s ($sum)"
  grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted)\)" \
    "$log_dir/run$i.log" | sed 's/^/  /'
done
echo "test-stress: $((runs - failed)) of $runs runs passed under stress-ng --cpu 4; logs in $log_dir"
[ "$failed" -eq 0 ]
