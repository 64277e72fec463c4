#!/bin/sh
# wait-servers.sh: the client guest waits (up to 90 s) until the server guest's app-servers.sh says
# every server is listening.
i=0
until [ -f "$T2R_WORK/servers-ready" ]; do
  i=$((i + 1)); [ $i -lt 900 ] || { echo "wait-servers: the servers never became ready"; exit 1; }
  sleep 0.1
done
