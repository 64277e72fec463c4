#!/bin/sh
# fork_return_server.sh SHIM RULES FAILOVER_RULES ACCEPT_FORK_ECHO EPOLL_ECHO TOOL: guest a's half of integration.fork_return.pair
# (fork_return_client.sh). Connections that a fork put in a child's hands alone go back to RDMA there
# (docs/architecture.md, "Back to RDMA"):
#  1. port 5012, before-return: accept_fork_echo handoff accepts on RDMA and forks; the parent closes
#     its copy, the child claims the connection, learns the parent let go, and after 1 s returns it
#     to RDMA through the listener it kept (its own rdma_cm port, the parent's directory redirect);
#  2. port 5014, before-return: accept_fork_echo handoff-late: the child claims the connection at
#     once, while the parent still holds it; the parent closes its copy 300 ms later, and the child
#     learns so when it asks at its return's first attempt; `tcp2rdma stat -a` (TOOL), run while
#     the client's last part goes, lists the child's connection on rdma;
#  3. port 5013: epoll_echo's server for the client whose parent exits (fork_return_client.sh): the
#     peer moved it back, and it returns with the client;
#  4. port 5040, background (FAILOVER_RULES): the postmaster's shape, the upgrade deferred at the
#     fork and taken up by the child; then the wire drops every frame for 6 s (fault_agent.sh wire),
#     the child's connection fails over to TCP, and returns to RDMA once the path answers.
# Each echo is checked by the client; here the log must show the four returns, the children's three.
set -u
shim=$1 rules=$2 failover_rules=$3 afe=$4 epoll_echo=$5 tool=$6
here=$(cd "$(dirname "$0")" && pwd)
log=$T2R_WORK/shim-$T2R_HOST.log
env="LD_PRELOAD=$shim TCP2RDMA_LOG=$log TCP2RDMA_LOG_TIME=1"
status=0
env $env TCP2RDMA_RULES="$rules" "$afe" 5012 handoff 500 2> "$T2R_WORK/server1.err" || status=1
# The client keeps the connection open until the stat is taken (late-stat-taken): a loaded guest once
# took longer to start the tool than the last part took to go.
(until [ -f "$T2R_WORK/late-last" ]; do sleep 0.1; done; "$tool" stat -a > /tmp/stat-late.txt 2>&1
 touch "$T2R_WORK/late-stat-taken") &
env $env TCP2RDMA_RULES="$rules" "$afe" 5014 handoff-late 2> "$T2R_WORK/server4.err" || status=1
env $env TCP2RDMA_RULES="$rules" "$epoll_echo" server 5013 lt 2> "$T2R_WORK/server2.err" || status=1
sh "$here/../back_to_tcp/fault_agent.sh" wire &
env $env TCP2RDMA_RULES="$failover_rules" "$afe" 5040 handoff 2> "$T2R_WORK/server3.err" || status=1
wait
sleep 0.5  # the children's last lines
grep -E 'let go|back on|failed|for good|still on tcp' "$log" | sed 's/^/fork-return-server:   /'
children=$(grep -c 'the parent let go: it may go back to rdma here' "$log")
late=$(grep -c 'the parent let go of the connection: it may go back to rdma here' "$log")
taken_up=$(grep -c 'the upgrade a fork interrupted goes on in this process (its parent let go' "$log")
failed_over=$(grep -c '5040 -> .*back on tcp (rdma path failed' "$log")
back=$(grep -c 'back on rdma' "$log")
echo "fork-return-server: $children child learned its parent let go in its answer, $late by asking later, $taken_up took a deferred upgrade up, $failed_over failed over, $back went back to rdma"
[ "$children" -eq 1 ] && [ "$late" -eq 1 ] && [ "$taken_up" -eq 1 ] && [ "$failed_over" -eq 1 ] && [ "$back" -eq 4 ] || status=1
[ -z "$(grep -E 'for good|reset' "$log")" ] || status=1
# The child's own stats segment lists the connection it took back to RDMA (docs/stats.md).
sed 's/^/fork-return-server: stat: /' /tmp/stat-late.txt
awk '$4 == "server" && $5 ~ /:5014$/ && $8 == "rdma" { found = 1 } END { exit !found }' /tmp/stat-late.txt || status=1
exit $status
