#!/bin/sh
# same-semantics.sh: the guest's half of integration.semantics_same.loop. Runs same_semantics.py under
# the shim on port 5030 (both ends on RDMA: rules/semantics.yaml) and on port 5031 (TCP), and fails
# unless the two transcripts are equal, every connection of the first was upgraded on both ends (the
# script waits for it), and the RDMA device carried the first run's bytes.
set -eu
here=$(dirname "$0")
log="$T2R_WORK/shim-semantics.log"
script="$here/same_semantics.py"
T2R_MIN_PKTS=100 "$here/expect-rdma" env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$log" python3 "$script" "$T2R_SELF" 5030 "$log" \
  > /tmp/semantics-rdma.txt
env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$log" python3 "$script" "$T2R_SELF" 5031 - > /tmp/semantics-tcp.txt
if ! diff -u /tmp/semantics-tcp.txt /tmp/semantics-rdma.txt; then
  echo "same-semantics: the RDMA connection (+) behaved otherwise than the TCP one (-)"
  exit 1
fi
cat /tmp/semantics-rdma.txt
echo "same-semantics: $(wc -l < /tmp/semantics-rdma.txt) steps read the same on RDMA and on TCP; $(grep -c 'upgraded to rdma' "$log") ends upgraded"
