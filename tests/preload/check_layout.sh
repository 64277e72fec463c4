#!/bin/sh
# check_layout.sh PRELOAD_DIR [LIMIT]: the module's source keeps the shape docs/architecture.md maps:
#  - no file over LIMIT lines (350);
#  - no include cycle between folders: counting a folder's .cpp files too, no folder depends on one
#    that depends back on it (each can be read, tested and changed knowing only the folders below);
#  - no include cycle between headers.
dir=$1
limit=${2:-350}
status=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$dir" || exit 2
for f in *.h *.cpp; do
  [ -e "$f" ] && { echo "not in a folder: $f (each file belongs to the folder of its concern)"; status=1; }
done
: > "$work/folders"
: > "$work/headers"
for f in */*.h */*.cpp; do
  lines=$(wc -l < "$f")
  if [ "$lines" -gt "$limit" ]; then
    echo "too long: $f has $lines lines (limit $limit)"
    status=1
  fi
  from=${f%%/*}
  echo "$from $from" >> "$work/folders"  # every folder is a node, even one nobody includes
  for inc in $(sed -n 's/^#include "\([a-z_]*\/[a-z_]*\.[a-z]*\)"/\1/p' "$f"); do
    to=${inc%%/*}
    [ "$to" != "$from" ] && echo "$from $to" >> "$work/folders"
    case $f in *.h) echo "$f $inc" >> "$work/headers" ;; esac
  done
done
# tsort prints each loop it finds (once per node on it): the members of every cycle.
loops() { tsort "$1" 2>&1 >/dev/null | grep -v 'input contains a loop' | sed 's/^tsort: /  /' | sort -u; }
cycle=$(loops "$work/folders")
if [ -n "$cycle" ]; then
  echo "include cycle between folders, through:"; echo "$cycle"
  echo "folder dependencies (folder -> folder it includes):"
  awk '$1 != $2' "$work/folders" | sort -u | sed 's/^/  /'
  status=1
fi
cycle=$(loops "$work/headers")
if [ -n "$cycle" ]; then
  echo "include cycle between headers, through:"; echo "$cycle"
  status=1
fi
if [ $status -eq 0 ]; then
  echo "preload layout: no file over $limit lines; folders in dependency order:"
  # tsort reads "a b" as a before b: each folder after every folder it includes.
  awk '{print $2, $1}' "$work/folders" | sort -u | tsort | tr '\n' ' '
  echo
fi
exit $status
