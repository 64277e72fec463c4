#!/bin/sh
# bench-calls-server.sh: the server guest's half of a bench's system-call count (bench-rr.sh with
# BENCH_CALLS=1). The client guest asks for each of its counted runs with $T2R_WORK/calls-NAME.port
# (the server's port in it); this counts the system calls of every process listening there, every
# thread (perf trace -s -p: the kernel counts, the processes run at speed), from before the client's
# run (it waits for $T2R_WORK/calls-NAME.traced) until its end ($T2R_WORK/calls-NAME.done), into
# $T2R_WORK/calls-NAME.server, then says $T2R_WORK/calls-NAME.written. Ends at $T2R_WORK/calls-over.
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
while [ ! -e "$T2R_WORK/calls-over" ]; do
  for ask in "$T2R_WORK"/calls-*.port; do
    [ -e "$ask" ] || continue
    name=${ask%.port}
    port=$(cat "$ask")
    rm -f "$ask"
    pids=$(ss -ltnpH "sport = :$port" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u | paste -sd, -)
    tracer=
    if [ -n "$pids" ]; then
      perf trace -s -p "$pids" -o "$name.server" 2>/dev/null &
      tracer=$!
      sleep 1  # perf attaches to every thread first
    fi
    touch "$name.traced"
    until [ -e "$name.done" ] || [ -e "$T2R_WORK/calls-over" ]; do sleep 0.1; done
    if [ -n "$tracer" ]; then
      kill -INT "$tracer"
      wait "$tracer"
    fi
    touch "$name.written"
  done
  sleep 0.2
done
