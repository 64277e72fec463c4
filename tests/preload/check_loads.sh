#!/bin/sh
# check_loads.sh LIB: a program runs with LIB preloaded, and the module's load hook really ran.
lib=$1
# A sanitized build of the module needs the sanitizer runtimes loaded first, ahead of the program's
# own libraries; leaks of the host program (sh, cat) are not ours to report.
runtimes=$(ldd "$lib" | awk '/lib(asan|ubsan)\.so/ {printf "%s ", $3}')
if [ -n "$runtimes" ]; then lib="$runtimes$lib"; export ASAN_OPTIONS=detect_leaks=0; fi
out=$(printf 'abc\n' | TCP2RDMA_LOG=1 LD_PRELOAD="$lib" sh -c 'cat; echo done' 2>&1)
expected=$(printf 'tcp2rdma: loaded\ntcp2rdma: loaded\nabc\ndone')
[ "$out" = "$expected" ] || { echo "unexpected output:"; echo "$out"; exit 1; }
quiet=$(printf 'x\n' | LD_PRELOAD="$lib" cat 2>&1)
[ "$quiet" = x ] || { echo "module not silent by default: $quiet"; exit 1; }
echo ok
