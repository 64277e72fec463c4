#!/bin/sh
# wait-listening.sh FILE [PATTERN]: the client guest's wait for a test server that says "listening"
# (or PATTERN) on its standard error, redirected to FILE (in T2R_WORK, which both guests share), or a
# wait for a line in a local FILE. At most 60 s.
pattern=${2:-listening}
i=0
until grep -q "$pattern" "$1" 2>/dev/null; do
  i=$((i + 1))
  [ $i -lt 300 ] || { echo "wait-listening: no '$pattern' in $1 after 60 s" >&2; exit 1; }
  sleep 0.2
done
