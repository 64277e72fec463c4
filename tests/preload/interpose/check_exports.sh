#!/bin/sh
# check_exports.sh LIB "CALL;CALL;...": the dynamic symbols LIB defines are exactly the listed calls.
lib=$1
want=$(printf '%s\n' "$2" | tr ';' '\n' | sed '/^$/d' | sort)
have=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWiV]$/ {print $3}' | sed 's/@.*//' | sort)
if [ "$want" != "$have" ]; then
  echo "exports of $lib differ from the intercepted calls"
  echo "--- wanted"; echo "$want"; echo "--- exported"; echo "$have"
  exit 1
fi
echo "exports of $lib: ${want:-none} (as intended)"
