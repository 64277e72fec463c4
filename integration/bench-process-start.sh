#!/usr/bin/env bash
# bench-process-start.sh [ROUNDS] [--vm]: what the module costs a process at exec, with no connection
# at all (most processes an LD_PRELOAD reaches: shells, cat, compilers). Runs /bin/true 40 times per
# round, plain and with libtcp2rdma.so preloaded (and, with TCP2RDMA_COMPARE_LIB=PATH, with a second
# build of the module), the kinds interleaved in every round; prints each kind's median, min and max
# over ROUNDS rounds (default 15) in ms a process. Reference: /bin/true without the module, same run.
# --vm: the same inside a loop guest of the testbed (emulated: every figure tens of times larger).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=${1:-15}
lib=${TCP2RDMA_LIB:-$root/build/preload/libtcp2rdma.so}
[ -f "$lib" ] || { echo "no $lib: build first (integration/test-all or cmake --build build)" >&2; exit 1; }
measure='
kinds="plain $1 ${3:-}"
rounds=$2
for kind in $kinds; do : > "/tmp/start-$(echo "$kind" | tr / _)"; done
r=0
while [ $r -lt "$rounds" ]; do
  for kind in $kinds; do
    s=$(date +%s%N); i=0
    while [ $i -lt 40 ]; do
      if [ "$kind" = plain ]; then /bin/true; else LD_PRELOAD=$kind /bin/true; fi
      i=$((i + 1))
    done
    echo $(( ($(date +%s%N) - s) / 40000 )) >> "/tmp/start-$(echo "$kind" | tr / _)"
  done
  r=$((r + 1))
done
for kind in $kinds; do
  sort -n "/tmp/start-$(echo "$kind" | tr / _)" | awk -v k="$kind" "{ v[NR] = \$1 } END {
    printf \"%-60s median %7.2f ms  min %7.2f  max %7.2f  (%d rounds)\\n\", k, v[int((NR + 1) / 2)] / 1000, v[1] / 1000, v[NR] / 1000, NR }"
done'
if [ "${2:-}" = --vm ]; then
  shares=(--share "$(dirname "$lib")")
  [ -z "${TCP2RDMA_COMPARE_LIB:-}" ] || shares+=(--share "$(dirname "$TCP2RDMA_COMPARE_LIB")")
  "$root/integration/deps.sh" testbed
  export TCP2RDMA_VM_KERNEL_DIR=${TCP2RDMA_VM_KERNEL_DIR:-$("$root/integration/testbed/kernel.sh")}
  "$root/integration/vm" loop --timeout 900 "${shares[@]}" \
    "sh -c '$measure' measure $lib $rounds ${TCP2RDMA_COMPARE_LIB:-}" 2>&1 | grep 'median'
else
  sh -c "$measure" measure "$lib" "$rounds" "${TCP2RDMA_COMPARE_LIB:-}"
fi
