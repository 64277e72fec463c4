#!/bin/sh
# postgres.sh: PostgreSQL 15 as packaged runs it (a postmaster that forks a backend per connection and
# closes its own copy; auxiliary processes forked before the first accept), for the pair tests.
#   postgres.sh init PORT              a fresh cluster for PORT in /tmp/pg/PORT, owned by the postgres
#                                      user, trusting connections from the test's link (no module:
#                                      initdb opens no socket)
#   postgres.sh server PORT            the command for app-servers.sh: that cluster's postmaster as
#                                      postgres, on T2R_SELF:PORT (ready: "ready to accept connections")
#   postgres.sh bench HOST PORT CLIENTS SECONDS
#                                      pgbench -i (scale 1), then TPC-B with CLIENTS connections over two
#                                      threads for SECONDS; fails when a transaction failed or the
#                                      balances disagree (every account, teller and branch total equals
#                                      the history's sum of deltas). Prints pgbench's report. As the run
#                                      starts it creates T2R_WORK/pgbench-running.
#   postgres.sh rounds HOST CLIENTS SECONDS ROUNDS PORT...
#                                      the benchmark's (integration/bench-postgres.sh): tables on each
#                                      PORT, then ROUNDS rounds of a run on each in turn, a "result" line
#                                      each (tps, latency); the balances checked at the end
#   postgres.sh stat-when-running TOOL FILE LOG
#                                      (guest A, in the background) once pgbench-running is there and
#                                      the module's LOG says 8 more connections upgraded (60 s at most),
#                                      TOOL (tcp2rdma) stat -a --json into FILE
#   postgres.sh server-checks FILE LOG N
#                                      (guest A, after the run) no connection stayed on TCP, LOG says N
#                                      upgraded, and FILE (once stat-when-running has written it: 60 s
#                                      at most, the stat starts slowly on a loaded testbed) lists 8
#                                      server connections on rdma; each failure says which
set -eu
bin=/usr/lib/postgresql/15/bin
data=/tmp/pg/${2:-}

prepare() { # HOST PORT: pgbench's tables, scale 1
  "$bin/pgbench" -h "$1" -p "$2" -U postgres -i -s 1 -q postgres > /tmp/pgbench-init.log 2>&1 ||
    { cat /tmp/pgbench-init.log; echo "postgres.sh: pgbench -i failed"; exit 1; }
}
run() { # HOST PORT CLIENTS SECONDS: TPC-B, its report in /tmp/pgbench.log; no failed transaction
  # -n: no vacuum first (pgbench's would empty the history, which the balances are checked against).
  "$bin/pgbench" -h "$1" -p "$2" -U postgres -n -c "$3" -j 2 -T "$4" postgres > /tmp/pgbench.log 2>&1 ||
    { cat /tmp/pgbench.log; echo "postgres.sh: pgbench failed"; exit 1; }
  grep -q '^number of failed transactions: 0 ' /tmp/pgbench.log ||
    { cat /tmp/pgbench.log; echo "postgres.sh: failed transactions"; exit 1; }
}
check() { # HOST PORT: every account, teller and branch total equals the history's sum of deltas
  sums=$("$bin/psql" -h "$1" -p "$2" -U postgres -At -c "select
      (select sum(abalance) from pgbench_accounts), (select sum(tbalance) from pgbench_tellers),
      (select sum(bbalance) from pgbench_branches), (select coalesce(sum(delta), 0) from pgbench_history),
      (select count(*) from pgbench_history)" postgres)
  echo "result balances port=$2 accounts|tellers|branches|history|transactions: $sums"
  echo "$sums" | awk -F'|' '{ exit !($1 == $2 && $2 == $3 && $3 == $4 && $5 > 0) }' ||
    { echo "postgres.sh: the balances disagree"; exit 1; }
}
case "$1" in
init)
  rm -rf "$data" && mkdir -p /tmp/pg && chown postgres:postgres /tmp/pg
  setpriv --reuid=postgres --regid=postgres --init-groups \
    "$bin/initdb" -D "$data" -A trust -U postgres --no-sync > /tmp/pg-initdb.log 2>&1 ||
    { cat /tmp/pg-initdb.log; exit 1; }
  echo "host all all 10.77.0.0/24 trust" >> "$data/pg_hba.conf"
  ;;
server)
  # fsync off and a small shared memory: a 1 GiB guest on an emulated disk; the connections are the test.
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$data" -k /tmp/pg \
    -c listen_addresses="$T2R_SELF" -p "$2" -c fsync=off -c synchronous_commit=off \
    -c shared_buffers=32MB -c max_connections=40
  ;;
bench)
  prepare "$2" "$3"
  # T2R_WORK/pgbench-running tells the server's guest that the run starts: it looks at its
  # connections (`tcp2rdma stat`) once its log says the 8 switched (in the background after each
  # connects: connecting pgbench's 8 clients took 2 to 3 s on a loaded testbed, once 10 s).
  touch "$T2R_WORK/pgbench-running"
  run "$2" "$3" "$4" "$5"
  cat /tmp/pgbench.log
  check "$2" "$3"
  ;;
rounds)
  # (integration/bench-postgres.sh) prepare each PORT, then ROUNDS rounds of SECONDS on each in turn,
  # each a "result" line; the balances checked at the end.
  host=$2 clients=$3 seconds=$4 rounds=$5
  shift 5
  for port in "$@"; do prepare "$host" "$port"; done
  for r in $(seq "$rounds"); do
    for port in "$@"; do
      run "$host" "$port" "$clients" "$seconds"
      echo "result round=$r port=$port clients=$clients tps=$(awk '/^tps = / {print $3}' /tmp/pgbench.log)" \
        "latency_ms=$(awk '/^latency average = / {print $4}' /tmp/pgbench.log)"
    done
  done
  for port in "$@"; do check "$host" "$port"; done
  ;;
stat-when-running)
  until [ -e "$T2R_WORK/pgbench-running" ]; do sleep 0.2; done
  before=$(grep -c 'upgraded to rdma' "$4" || true)
  for _ in $(seq 300); do
    [ "$(grep -c 'upgraded to rdma' "$4" || true)" -ge $((before + 8)) ] && break
    sleep 0.2
  done
  # The stat again (up to 5 times, a second apart) while it lists fewer than the run's 8: once, in a
  # full run, one backend's entry was missing from a stat taken 2 s after its upgrade (not yet
  # explained; docs/testbed.md). A stat that never lists them all still fails the checks.
  for _ in 1 2 3 4 5; do
    "$2" stat -a --json > "$3.tmp" 2>&1
    [ "$(grep -o '.role.:.server.,.local.:.10.77.0.1:5018.,[^}]*.path.:.rdma.' "$3.tmp" | wc -l)" -ge 8 ] && break
    sleep 1
  done
  mv "$3.tmp" "$3"
  ;;
server-checks)
  ! grep 'stays tcp' "$3" || { echo "postgres.sh: a connection stayed on TCP"; exit 1; }
  upgraded=$(grep -c 'upgraded to rdma' "$3" || true)
  [ "$upgraded" -eq "$4" ] || { echo "postgres.sh: $upgraded connections upgraded, not $4"; exit 1; }
  for _ in $(seq 300); do [ -e "$2" ] && break; sleep 0.2; done
  [ -e "$2" ] || { echo "postgres.sh: no stat in 60 s"; exit 1; }
  on_rdma=$(grep -o '.role.:.server.,.local.:.10.77.0.1:5018.,[^}]*.path.:.rdma.' "$2" | wc -l)
  [ "$on_rdma" -eq 8 ] || { cat "$2"; echo "postgres.sh: the stat lists $on_rdma server connections on rdma, not 8"; exit 1; }
  ;;
*) echo "postgres.sh: init PORT | server PORT | bench HOST PORT CLIENTS SECONDS | rounds HOST CLIENTS SECONDS ROUNDS PORT... | stat-when-running TOOL FILE LOG | server-checks FILE LOG N" >&2; exit 2 ;;
esac
