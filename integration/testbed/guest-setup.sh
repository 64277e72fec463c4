# Sourced first by every run script inside the guest (chroot of the host's root): brings up the link
# named by T2R_NETDEV with T2R_SELF (and T2R_SELF6), puts the Soft-RoCE device rxe0 on it and waits
# until its port is ACTIVE. Exits with 97 (testbed failure, not a test failure) when that cannot be done.
# `sleep` is busybox's (static): the scripts' wait loops start one every 0.05 to 0.5 s, and under TCG
# coreutils' (dynamically linked) costs about five times the CPU, which the guests' work needs.
mkdir -p /run/t2r-bin && ln -sf /bin/busybox /run/t2r-bin/sleep
export PATH=/run/t2r-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp
export T2R_RDMA_DEV=rxe0
testbed_fail() { echo "testbed: $*" >&2; echo 97 > "$T2R_WORK/exit-$T2R_HOST"; exit 97; }

ip link set lo up
if [ "$T2R_NETDEV" = dummy0 ] && ! ip link show dummy0 >/dev/null 2>&1; then
  ip link add dummy0 type dummy || testbed_fail "cannot create dummy0"
fi
ip addr add "$T2R_SELF/24" dev "$T2R_NETDEV" || testbed_fail "cannot address $T2R_NETDEV"
# IPv6 beside it (fd77::N for 10.77.0.N; no duplicate address detection to wait for), for the tests of
# native IPv6 and dual-stack connections.
export T2R_SELF6="fd77::${T2R_SELF##*.}" T2R_PEER6="fd77::${T2R_PEER##*.}"
ip -6 addr add "$T2R_SELF6/64" dev "$T2R_NETDEV" nodad || testbed_fail "cannot give $T2R_NETDEV an IPv6 address"
ip link set "$T2R_NETDEV" up || testbed_fail "cannot bring up $T2R_NETDEV"
# The pair's wire joins two known guests: each knows the other's link-layer address for good, so a
# stall of the virtual wire for a few seconds is ridden out by TCP's and RDMA's retransmissions
# instead of failing a connect() with "No route to host" when three ARP probes went unanswered (seen
# in CI). Address resolution is the kernel's business, not the shim's.
if [ -n "${T2R_PEER_MAC:-}" ]; then
  ip neigh replace "$T2R_PEER" lladdr "$T2R_PEER_MAC" dev "$T2R_NETDEV" nud permanent &&
    ip -6 neigh replace "$T2R_PEER6" lladdr "$T2R_PEER_MAC" dev "$T2R_NETDEV" nud permanent ||
    testbed_fail "cannot enter the peer's link-layer address"
fi
rdma link add rxe0 type rxe netdev "$T2R_NETDEV" || testbed_fail "rdma link add rxe0 failed"
i=0
until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
  i=$((i + 1)); [ $i -lt 100 ] || testbed_fail "rxe0 port never became ACTIVE"; sleep 0.1
done
# Without udev nobody relaxes the device nodes; unprivileged tests (RLIMIT_MEMLOCK) need them.
chmod 0666 /dev/infiniband/* 2>/dev/null
ulimit -c 0
cd "$T2R_WORK" || testbed_fail "no work directory"

# A heartbeat on the shared work directory: when a guest hangs or its link stalls, the harness shows
# the last few beats (uptime, the link's packet counters, rxe's counters, what runs) of each guest.
bash "$T2R_SOURCE_DIR/integration/testbed/heartbeat.sh" &
