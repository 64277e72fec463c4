#!/bin/sh
# wire_cut.sh DELAY SECONDS: after DELAY seconds this guest drops every frame on the test link for
# SECONDS (netem loss 100%), longer than RC's retries, then lets them through again. Run in both guests
# for a total outage.
sleep "$1"
tc qdisc add dev "$T2R_NETDEV" root netem loss 100%
sleep "$2"
tc qdisc del dev "$T2R_NETDEV" root
