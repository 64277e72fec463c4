#!/bin/sh
# check_loads.sh LIB: a program runs with LIB preloaded, and the module's load hook really ran.
lib=$1
# A sanitized build of the module needs the sanitizer runtimes loaded first, ahead of the program's
# own libraries; leaks of the host program (sh, cat) are not ours to report.
runtimes=$(ldd "$lib" | awk '/lib(asan|ubsan)\.so/ {printf "%s ", $3}')
if [ -n "$runtimes" ]; then lib="$runtimes$lib"; export ASAN_OPTIONS=detect_leaks=0; fi
out=$(printf 'abc\n' | TCP2RDMA_LOG=1 LD_PRELOAD="$lib" sh -c 'cat; echo done' 2>&1 | sed 's/\[[0-9]*\]/[PID]/')
expected=$(printf 'tcp2rdma[PID]: loaded\ntcp2rdma[PID]: loaded\nabc\ndone')
[ "$out" = "$expected" ] || { echo "unexpected output:"; echo "$out"; exit 1; }
log=$(mktemp)
printf 'x\n' | TCP2RDMA_LOG="$log" LD_PRELOAD="$lib" cat >/dev/null
grep -q '^tcp2rdma\[[0-9]*\]: loaded$' "$log" || { echo "no line in the log file:"; cat "$log"; rm -f "$log"; exit 1; }
rm -f "$log"
quiet=$(printf 'x\n' | LD_PRELOAD="$lib" cat 2>&1)
[ "$quiet" = x ] || { echo "module not silent by default: $quiet"; exit 1; }
echo ok
