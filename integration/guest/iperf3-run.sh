#!/bin/sh
# iperf3-run.sh server | client ARGS...: one iperf3 test between the two guests under the shim
# (T2R_SHIM, rules in TCP2RDMA_RULES). The client checks, from iperf3's JSON: the receiver got what the
# sender sent, each direction, short of at most what was in flight when the test ended (iperf3 stops
# counting then, with kernel TCP too; byte identity is what the nc tests check), and rxe carried at
# least one packet per 4 KiB of it
# (T2R_EXPECT=rdma, the default) or none (tcp); and the shim's log says each connection was upgraded.
set -eu
here=$(dirname "$0")
expect=${T2R_EXPECT:-rdma}
log="$T2R_WORK/shim-$T2R_HOST.log"
pkts() { "$here/rdma-counters" | awk -v c="$1" '$1==c{print $2}'; }
run() { env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$log" "$@"; }
case "$1" in
  server) run iperf3 -s -1 -J > "$T2R_WORK/iperf3-server.json"; exit ;;
  client) shift ;;
  *) echo "usage: iperf3-run.sh server | client ARGS..." >&2; exit 2 ;;
esac
before=$(( $(pkts sent_pkts) + $(pkts rcvd_pkts) ))
upgraded_before=$(grep -c 'upgraded to rdma' "$log" 2>/dev/null || true)
# Until the server listens (started beside this client, or in the other guest): 60 s at most, by the
# clock, as a loaded guest once needed more than 30 tries 0.3 s apart to start it.
give_up=$(( $(date +%s) + 60 ))
# iperf3 -J exits 0 when it cannot connect (3.12): its JSON's error says so.
until run iperf3 -c "$T2R_PEER" -J "$@" > /tmp/iperf3.json && ! grep -q '"error":.*unable to connect' /tmp/iperf3.json; do
  [ "$(date +%s)" -lt "$give_up" ] || { cat /tmp/iperf3.json; exit 1; }; sleep 0.3; done
moved=$(( $(pkts sent_pkts) + $(pkts rcvd_pkts) - before ))
python3 - "$moved" "$expect" /tmp/iperf3.json <<'PY'
import json, sys
moved, expect, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
r = json.load(open(path))
if "error" in r:
    sys.exit("iperf3: " + r["error"])
end = r["end"]
pairs = [("forward", end["sum_sent"], end["sum_received"])]
if "sum_sent_bidir_reverse" in end:
    pairs.append(("reverse", end["sum_sent_bidir_reverse"], end["sum_received_bidir_reverse"]))
total = 0
for name, sent, received in pairs:
    print(f"iperf3 {name}: sent {sent['bytes']} bytes, received {received['bytes']} bytes, "
          f"{received['bits_per_second'] / 1e6:.0f} Mbit/s")
    in_flight = sent["bytes"] - received["bytes"]
    if sent["bytes"] == 0 or in_flight < 0 or in_flight > 8 * 1024 * 1024:
        sys.exit(f"iperf3 {name}: the receiver got {received['bytes']} of {sent['bytes']} bytes")
    total += sent["bytes"]
if expect == "rdma" and moved < total // 4096:
    sys.exit(f"path: only {moved} RDMA packets for {total} bytes")
if expect == "tcp" and moved != 0:
    sys.exit(f"path: {moved} RDMA packets on a path that must stay TCP")
print(f"path: {expect} as expected ({moved} RDMA packets)")
PY
streams=$(( $(grep -c 'upgraded to rdma' "$log" || true) - ${upgraded_before:-0} ))
echo "shim: $streams connections upgraded (control and data)"
[ "$expect" != rdma ] || [ "$streams" -ge 2 ] || { cat "$log"; echo "the shim upgraded fewer than 2 connections"; exit 1; }
