#!/bin/sh
# check_layout.sh PRELOAD_DIR: the module's source keeps the shape docs/architecture.md describes:
# no file over the line limit, and no include cycle, neither between folders nor between files.
# (A cycle means no folder can be read, tested or changed without the others.)
dir=$1
limit=${2:-350}
status=0
edges_folders=$(mktemp) edges_files=$(mktemp)
trap 'rm -f "$edges_folders" "$edges_files"' EXIT
cd "$dir" || exit 2
for f in */*.h */*.cpp; do
  lines=$(wc -l < "$f")
  if [ "$lines" -gt "$limit" ]; then
    echo "too long: $f has $lines lines (limit $limit)"
    status=1
  fi
  from=${f%%/*}
  # The header a .cpp implements counts as the same node: foo.cpp including foo.h is no dependency.
  node=${f%.*}
  sed -n 's/^#include "\([a-z_]*\/[a-z_]*\)\.[a-z]*"/\1/p' "$f" | while read -r inc; do
    [ "$inc" = "$node" ] && continue
    echo "$node $inc" >> "$edges_files"
    to=${inc%%/*}
    [ "$to" != "$from" ] && echo "$from $to" >> "$edges_folders"
  done
done
if ! tsort "$edges_folders" > /dev/null 2> /tmp/layout.$$; then
  echo "include cycle between folders:"; sed 's/^tsort: /  /' /tmp/layout.$$
  echo "folder dependencies:"; sort -u "$edges_folders" | sed 's/^/  /'
  status=1
fi
if ! tsort "$edges_files" > /dev/null 2> /tmp/layout.$$; then
  echo "include cycle between files:"; sed 's/^tsort: /  /' /tmp/layout.$$
  status=1
fi
rm -f /tmp/layout.$$
[ $status -eq 0 ] && echo "preload layout: no file over $limit lines, no include cycle"
exit $status
