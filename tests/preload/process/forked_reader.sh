#!/bin/sh
# forked_reader.sh SHIM RULES: integration.forked_reader.loop. rsync's shape (forked_reader.py), both
# ends in the loop guest: after a greeting the client forks, its child only reads the connection and
# its parent only writes it. The connection stays on RDMA in the parent, which relays the peer's
# bytes to the child (docs/architecture.md, "Forks"): 4 MiB from the server on each of three
# connections (before-return rules, both ends), 3 MiB from the client's parent, checked by SHA-256 at
# both ends:
#  - 5016 plain: every byte through the relay, and the connection never moves back at either end;
#  - 5017 the child writes halfway: it claims the connection whole and it moves back to TCP under
#    the child's reads;
#  - 5018 the parent exits while its child still reads: it hands the connection over as it leaves.
# rxe must carry the server's bytes (received packets at least 3 x 4 MiB / 4 KiB), no connection may
# be reset. About 10 s.
set -u
shim=$1 rules=$2
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
log=$T2R_WORK/shim-$T2R_HOST.log
size=4194304
run() { env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" "$@"; }
resets() { grep -i "reset\|the rdma stream failed" "$log" | grep -vc "stays tcp"; }
# In a sanitized run (ASAN_OPTIONS set, docs/testbed.md) python3's own memory left at exit is not the
# module's: leak checking stays with the instrumented test programs.
[ -z "${ASAN_OPTIONS:-}" ] || export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
touch "$log" && chmod 666 "$log"
status=0
before=$("$guest/rdma-counters")
run python3 "$here/forked_reader.py" server 5016 5017 5018 > "$T2R_WORK/server.out" 2>&1 &
server=$!
until ss -ltn | grep -q ":5018 "; do sleep 0.1; done
for c in 5016:plain 5017:child-writes 5018:parent-exits; do
  port=${c%%:*} case=${c#*:}
  run python3 "$here/forked_reader.py" client 10.77.0.1 "$port" "$case" $size "/tmp/child-$port.out" &
done
wait $server || status=1
for port in 5016 5017 5018; do
  for i in $(seq 300); do [ -s /tmp/child-$port.out ] && break; sleep 0.1; done  # 5018's child outlives its parent
  out=$(cat /tmp/child-$port.out 2>/dev/null || echo "FAIL: no word from the child of $port")
  echo "forked-reader client: $port: $out"
  case $out in ok*) ;; *) status=1 ;; esac
done
after=$("$guest/rdma-counters")
cat "$T2R_WORK/server.out"
received=$(printf '%s\n%s\n' "$before" "$after" | awk '$1 == "rcvd_pkts" { v[n++] = $2 } END { print v[1] - v[0] }')
exact=$(grep -c ": .* bytes from the client, ok$" "$T2R_WORK/server.out")
relayed=$(grep -c "reads from the parent's relay" "$log")
# The server's ends (labelled "server ...:PORT -> ...") and the clients' ("client ... -> ...:PORT:").
upgraded=$(grep -c "server .*:501[678] -> .*upgraded to rdma" "$log")
moved_5016=$(grep -c ":5016[: ].*back on tcp" "$log")
claimed_5017=$(grep -c ":5017: .*back on tcp for a child that uses it" "$log")
left_5018=$(grep -c ":5018: .*back on tcp for the children that hold it, as this process leaves" "$log")
echo "forked-reader: $exact of 3 clients' bytes exact at the server, $upgraded server ends upgraded;" \
  "$relayed children read through a relay; 5016 moved back $moved_5016 times, 5017 claimed whole" \
  "$claimed_5017, 5018 handed over at exit $left_5018; rxe received $received packets; $(resets) resets"
[ "$exact" -eq 3 ] && [ "$upgraded" -eq 3 ] && [ "$relayed" -eq 3 ] && [ "$moved_5016" -eq 0 ] &&
  [ "$claimed_5017" -eq 1 ] && [ "$left_5018" -eq 1 ] && [ "$received" -ge $((3 * size / 4096)) ] &&
  [ "$(resets)" -eq 0 ] || status=1
grep -v "credentials changed" "$log" | cut -c1-240
exit $status
