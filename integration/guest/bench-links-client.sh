#!/bin/sh
# bench-links-client.sh SHIM RULES N BYTES: the client guest's half of integration/bench-links.sh. Runs
# of hold_connections.py against the server guest's echo servers, those MODES names (default all
# three): tcp (without the module: the reference), background (under the module, upgrading in the
# background, port 5030), before-return (port 5031). Each prints a "result" line: the client's own measures, how many connections
# its log shows on RDMA and on TCP (and why), the setup times its log gives, and rxe's packets.
set -u
shim=$1 rules=$2 n=$3 bytes=$4
here=$(cd "$(dirname "$0")" && pwd)
sh "$here/wait-servers.sh" || exit 1
# The application's own connections need a soft limit above N; the module's descriptors go above it.
ulimit -Hn 1048576 2>/dev/null; ulimit -Sn 65536
run() { # MODE PORT [env...]
  mode=$1 port=$2
  shift 2
  log=/tmp/bench-$mode.log
  : > "$log"
  before=$("$here/rdma-counters" | awk '$1 == "sent_pkts" {print $2}')
  out=$(env "$@" TCP2RDMA_LOG="$log" python3 "$here/hold_connections.py" "$T2R_PEER" "$port" "$n" "$bytes" 2>&1)
  status=$?
  after=$("$here/rdma-counters" | awk '$1 == "sent_pkts" {print $2}')
  rdma=$(grep -c 'upgraded to rdma' "$log")
  tcp=$(grep -c 'stays tcp' "$log")
  setups=$(grep -o 'setup [0-9]* ms' "$log" | awk '{print $2}' | sort -n | awk '
    { v[NR] = $1 }
    END { if (NR == 0) { print "-"; exit }
          p90 = int(NR * 0.9 + 0.5); if (p90 < 1) p90 = 1
          printf "%d/%d/%d\n", v[int((NR + 1) / 2)], v[p90], v[NR] }')
  echo "result mode=$mode status=$status $(echo "$out" | grep '^connections=') on_rdma=$rdma on_tcp=$tcp setup_ms_p50/p90/max=$setups rdma_packets=$((after - before))"
  echo "$out" | grep '^failed' | head -3
  grep -o 'stays tcp (.*' "$log" | sed 's/ ([0-9]* ms)//' | sort | uniq -c | sort -rn | head -4 | sed 's/^/  why: /'
  grep -o 'receive ring [0-9]* KiB, the peer.s [0-9]* KiB' "$log" | sort | uniq -c | sort -rn | head -3 | sed 's/^/  rings: /'
}
for mode in ${MODES:-tcp background before-return}; do
  case $mode in
    tcp) run tcp 5030 ;;
    background) run background 5030 LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" ;;
    before-return) run before-return 5031 LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" ;;
  esac
done
