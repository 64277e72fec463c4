#!/bin/sh
# close_semantics.sh BINARY BASE_PORT: runs every case of close_semantics on loopback, over kernel TCP
# (no shim): the expectations the shim is held to (integration.close_semantics.pair) are the kernel's.
set -u
bin=$1 port=$2 status=0
for mode in orderly linger0 unread; do
  "$bin" server "$port" "$mode" & server=$!
  "$bin" client 127.0.0.1 "$port" "$mode" || { echo "client $mode failed"; status=1; }
  wait "$server" || { echo "server $mode: not what the kernel was expected to show"; status=1; }
  port=$((port + 1))
done
exit $status
