#!/bin/sh
# check_loads.sh LIB: a program runs with LIB preloaded, and the module's load hook really ran.
lib=$1
out=$(printf 'abc\n' | TCP2RDMA_LOG=1 LD_PRELOAD="$lib" sh -c 'cat; echo done' 2>&1)
expected=$(printf 'tcp2rdma: loaded\ntcp2rdma: loaded\nabc\ndone')
[ "$out" = "$expected" ] || { echo "unexpected output:"; echo "$out"; exit 1; }
quiet=$(printf 'x\n' | LD_PRELOAD="$lib" cat 2>&1)
[ "$quiet" = x ] || { echo "module not silent by default: $quiet"; exit 1; }
echo ok
