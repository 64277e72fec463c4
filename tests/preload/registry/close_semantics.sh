#!/bin/sh
# close_semantics.sh BINARY: runs every case of close_semantics on loopback, over kernel TCP (no shim):
# the expectations the shim is held to (integration.close_semantics.pair) are the kernel's. Each server
# listens on a port the kernel picks (it prints it), so parallel tests cannot take it first.
set -u
bin=$1 status=0
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
for mode in orderly linger0 unread; do
  "$bin" server 0 "$mode" >"$dir/$mode" & server=$!
  port=
  for _ in $(seq 100); do
    port=$(sed -n 's/^port //p' "$dir/$mode")
    [ -n "$port" ] && break
    sleep 0.05
  done
  if [ -z "$port" ]; then
    echo "server $mode: no port after 5 s"; kill "$server" 2>/dev/null; status=1; continue
  fi
  "$bin" client 127.0.0.1 "$port" "$mode" || { echo "client $mode failed"; status=1; }
  wait "$server" || { echo "server $mode: not what the kernel was expected to show"; status=1; }
  sed '/^port /d' "$dir/$mode"
done
exit $status
