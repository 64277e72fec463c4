#!/usr/bin/env bash
# failed-output.sh BUILD_DIR: prints again, at the end of a long run, what each test that failed in
# the last ctest run of BUILD_DIR printed, and the end of its guests' consoles. A CI log is often read
# from its tail; the failing test's own lines are otherwise far up among hundreds of passing ones.
set -uo pipefail
build=$1
failed=$build/Testing/Temporary/LastTestsFailed.log
log=$build/Testing/Temporary/LastTest.log
[ -s "$failed" ] && [ -f "$log" ] || exit 0
while IFS=: read -r _ name; do
  [ -n "$name" ] || continue
  echo "---- $name: its output (last 80 lines)"
  # The block between the test's "Output:" rule and "<end of output>" in ctest's log.
  awk -v want="\"$name\" start time:" '
    index($0, want) == 1 { inside = 1; next }
    inside && /^<end of output>$/ { exit }
    inside && /^Output:$/ { next }
    inside && /^-+$/ && !seen_rule { seen_rule = 1; next }
    inside { print }' "$log" | tail -n 80
  for console in "$build/vm-work/$name"/console-*.log; do
    [ -s "$console" ] || continue
    echo "---- $name: the end of ${console##*/}"
    tail -n 25 "$console"
  done
done <"$failed"
