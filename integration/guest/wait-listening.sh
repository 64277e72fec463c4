#!/bin/sh
# wait-listening.sh FILE: the client guest's wait for a test server that says "listening" on its
# standard error, redirected to FILE (in T2R_WORK, which both guests share). At most 60 s.
i=0
until grep -q listening "$1" 2>/dev/null; do
  i=$((i + 1))
  [ $i -lt 300 ] || { echo "wait-listening: no 'listening' in $1 after 60 s" >&2; exit 1; }
  sleep 0.2
done
