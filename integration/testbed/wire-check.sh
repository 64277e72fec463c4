#!/bin/sh
# wire-check.sh: run inside a pair guest right after its command failed. Does the virtual wire still
# carry frames both ways? A test can fail only because QEMU's stream link stopped carrying one guest's
# frames for a while (docs/testbed.md, "A stall can be silent"): seen in CI as a kernel TCP connect()
# failing with "No route to host" (the peer's ARP replies never came) between two tests that passed.
# That is the testbed failing, not the test, and the harness runs the test once more; but only when
# the wire is found dead now, not guessed from the failure.
#
# How: datagrams to a port nobody listens on (UDP 1) at the peer, every half second for up to
# T2R_WIRE_CHECK_S seconds (15). A working wire and a working peer kernel answer the first of them
# with an ICMP port unreachable (after ARP), which a connected UDP socket reports as ECONNREFUSED.
# No answer at all: the wire (or the peer's guest) is dead; the file wire-dead-HOST in the work
# directory says so to the harness, which also checks that no guest cut the link on purpose (netem).
# Skipped when the peer's command has already ended (its guest may be powering off) or when this
# guest's own link has a netem qdisc (a test that cuts the wire).
peer_host=a; [ "$T2R_HOST" = a ] && peer_host=b
[ -e "$T2R_WORK/exit-$peer_host" ] && exit 0
if tc qdisc show dev "$T2R_NETDEV" 2>/dev/null | grep -q netem; then
  echo "wire-check: skipped: this guest's $T2R_NETDEV has a netem qdisc (the test cut the wire)"; exit 0
fi
status=$1
if python3 - "$T2R_PEER" "${T2R_WIRE_CHECK_S:-15}" <<'EOF'
import socket, sys, time
peer, limit = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((peer, 1))
s.settimeout(0.5)
start = time.monotonic()
while time.monotonic() - start < limit:
    try:
        s.send(b"tcp2rdma wire check")
        s.recv(64)
    except ConnectionRefusedError:  # the peer's port unreachable came back: frames go both ways
        print("wire-check: %s answered after %.1f s: the wire works" % (peer, time.monotonic() - start))
        sys.exit(0)
    except (socket.timeout, OSError):  # no answer yet, or ARP failed (EHOSTUNREACH): ask again
        time.sleep(0.5)
sys.exit(1)
EOF
then exit 0; fi
read -r rx < "/sys/class/net/$T2R_NETDEV/statistics/rx_packets"
read -r tx < "/sys/class/net/$T2R_NETDEV/statistics/tx_packets"
echo "wire-check: $T2R_PEER answered nothing for ${T2R_WIRE_CHECK_S:-15} s after the command failed" \
     "(status $status; $T2R_NETDEV rx $rx tx $tx; $(ip neigh show "$T2R_PEER" dev "$T2R_NETDEV" | tr '\n' ' '))" |
  tee "$T2R_WORK/wire-dead-$T2R_HOST"
