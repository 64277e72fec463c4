#!/bin/sh
# wire_cut.sh DELAY SECONDS: once both ends of stream_failover have their stream up ($T2R_WORK/connected-
# server and -client), waits DELAY seconds, then drops every frame on this guest's test link for
# SECONDS (netem loss 100%), longer than RC's retries, and lets them through again. Run in both guests
# for a total outage. Says when it cut and when it restored (guest uptime), so a run the cut missed
# shows why.
until [ -f "$T2R_WORK/connected-server" ] && [ -f "$T2R_WORK/connected-client" ]; do sleep 0.1; done
sleep "$1"
tc qdisc add dev "$T2R_NETDEV" root netem loss 100% && echo "wire_cut: cut at $(cut -d' ' -f1 /proc/uptime)" >&2
sleep "$2"
tc qdisc del dev "$T2R_NETDEV" root && echo "wire_cut: restored at $(cut -d' ' -f1 /proc/uptime)" >&2
