#!/bin/sh
# nginx.sh files | fetch HOST SERVER_SHIM_LOG | fetch-parallel HOST SERVER_SHIM_LOG WORKERS: the halves
# of the nginx tests (integration/nginx/nginx.conf).
#   files  makes the files nginx serves (/tmp/www: big, 20 MB, and small, 1000 bytes, random) and
#          leaves their sha256 in T2R_WORK for the fetching side.
#   fetch  waits until nginx's worker has made its RDMA listener (SERVER_SHIM_LOG says so), then
#          fetches big, small and big again with curl under the shim (app-run.sh: each connection
#          upgraded, RDMA packets moved) and compares each with the sha256 the serving side left.
#   fetch-parallel  waits until each of the WORKERS workers has its RDMA listener (on the listener's
#          port, or on its own), then fetches big and small four times each over eight connections at
#          once (curl --parallel): every connection upgraded, every file's sha256 equal.
#   wrk HOST SERVER_SHIM_LOG WORKERS CONNECTIONS  waits for the workers' RDMA listeners as
#          fetch-parallel does, then loads small for 8 s with wrk (2 threads, CONNECTIONS keep-alive
#          connections) under the shim: no socket error, no answer later than 20 s, none but 200,
#          and every connection wrk made upgraded (none stays tcp), RDMA packets moved.
set -eu
here=$(dirname "$0")
case "$1" in
  files)
    mkdir -p /tmp/www
    head -c 20000000 /dev/urandom > /tmp/www/big
    head -c 1000 /dev/urandom > /tmp/www/small
    for f in big small; do sha256sum < /tmp/www/$f | cut -d' ' -f1 > "$T2R_WORK/www-$f.sha256"; done
    ;;
  fetch)
    i=0
    until grep -q 'RDMA listener made in this process' "$3" 2>/dev/null; do
      i=$((i + 1)); [ $i -lt 300 ] || { echo "nginx.sh: the worker never made its RDMA listener:"; cat "$3"; exit 1; }
      sleep 0.1
    done
    for f in big small big; do
      rm -f /tmp/got
      sh "$here/app-run.sh" 1 10 curl -sS -o /tmp/got "http://$2:5019/$f"
      [ "$(sha256sum < /tmp/got | cut -d' ' -f1)" = "$(cat "$T2R_WORK/www-$f.sha256")" ] ||
        { echo "nginx.sh: $f arrived different"; exit 1; }
      echo "nginx.sh: $f: sha256 equal"
    done
    ;;
  fetch-parallel|wrk)
    i=0
    until [ "$(cat "$3" 2>/dev/null | grep -c -e 'RDMA listener made' -e 'RDMA listener on rdma_cm port')" -ge "$4" ]; do
      i=$((i + 1)); [ $i -lt 300 ] || { echo "nginx.sh: not every worker made its RDMA listener:"; cat "$3"; exit 1; }
      sleep 0.1
    done
    if [ "$1" = wrk ]; then
      log="$T2R_WORK/shim-$T2R_HOST.log"
      pkts() { "$here/rdma-counters" | awk '$1=="sent_pkts"||$1=="rcvd_pkts"{n+=$2} END{print n}'; }
      before=$(pkts)
      env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$log" wrk -t2 -c"$5" -d8s --timeout 20s "http://$2:5019/small" > /tmp/wrk.out 2>&1 ||
        { cat /tmp/wrk.out; echo "nginx.sh: wrk failed"; exit 1; }
      cat /tmp/wrk.out
      moved=$(( $(pkts) - before ))
      upgraded=$(grep -c 'upgraded to rdma' "$log" || true)
      echo "nginx.sh: wrk: $upgraded connections upgraded, $moved RDMA packets"
      ! grep -E -q 'Socket errors|Non-2xx' /tmp/wrk.out || { echo "nginx.sh: wrk saw errors"; exit 1; }
      grep -E -q '^ +[1-9][0-9]* requests in' /tmp/wrk.out || { echo "nginx.sh: no request answered"; exit 1; }
      ! grep 'stays tcp' "$log" || { echo "nginx.sh: a connection stayed tcp"; exit 1; }
      [ "$upgraded" -ge "$5" ] || { cat "$log"; echo "nginx.sh: fewer than $5 connections upgraded"; exit 1; }
      [ "$moved" -ge 1000 ] || { echo "nginx.sh: fewer than 1000 RDMA packets"; exit 1; }
      exit 0
    fi
    urls=""
    for n in 1 2 3 4; do
      for f in big small; do urls="$urls -o /tmp/got-$f-$n http://$2:5019/$f"; done
    done
    # shellcheck disable=SC2086
    sh "$here/app-run.sh" 8 10 curl -sS --parallel --parallel-immediate --parallel-max 8 $urls
    for n in 1 2 3 4; do
      for f in big small; do
        [ "$(sha256sum < /tmp/got-$f-$n | cut -d' ' -f1)" = "$(cat "$T2R_WORK/www-$f.sha256")" ] ||
          { echo "nginx.sh: $f ($n) arrived different"; exit 1; }
      done
    done
    echo "nginx.sh: 8 parallel fetches: sha256 equal"
    ;;
  *) echo "usage: nginx.sh files | fetch HOST SERVER_SHIM_LOG | fetch-parallel HOST SERVER_SHIM_LOG WORKERS | wrk HOST SERVER_SHIM_LOG WORKERS CONNECTIONS" >&2; exit 2 ;;
esac
