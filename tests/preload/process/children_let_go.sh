#!/bin/sh
# children_let_go.sh SHIM RULES a|b: integration.children_let_go.pair. Two connections on RDMA (rules
# before-return) go back to TCP when a forked process uses them, and back to RDMA once no other
# process holds them (docs/architecture.md, "Back to RDMA"):
#  - socat TCP-LISTEN:5012,fork EXEC:cat: its worker child uses the connection its parent accepted
#    (lent, then claimed: back on TCP), then forks the child that execs cat with pipes, which holds
#    none of it; the worker carries the bytes between the connection and cat;
#  - child_uses_once.py on 5015: the parent's child writes once and exits; the parent echoes;
#  - socat TCP-LISTEN:5013,fork EXEC:cat,nofork, inetd's shape: the worker child execs cat with the
#    connection on 0 and 1 (back on TCP at the exec), and socat's parent closes its copy; the return
#    goes along to cat (process/exec_returns.h), whose module asks socat's directory for the request;
#  - socat TCP-LISTEN:5014,fork EXEC:cat,nofork,su=nobody run as root (inetd with a user): the child
#    changes its credentials, then execs cat; the parent's answer to the child's claim says it let go,
#    which goes along, since cat (nobody) cannot look at socat (root), the connection's maker;
#  - the same on 5023 under background rules (BG_RULES, both ends), through a shell script that execs
#    cat: the fork interrupts the upgrade, which goes along to sh, from sh to cat, and goes on there
#    at cat's first read (upgraded to rdma in cat);
#  - fork_late_cat.py on 5024, under background rules: accept, fork, and the child execs cat only
#    after 1 s, later than the 200 ms after which the parent takes the deferred upgrade up itself;
#    the parent closes its copy at 0.5 s, while its upgrade is still on TCP (on the emulated
#    testbed): the upgrade goes back to the child and on in cat (or, had the parent reached RDMA
#    first, the connection returns to RDMA in cat), and never stays TCP in both;
#  - spawn_cat.py on 5016: inetd's shape through posix_spawn (file actions that dup2 the connection
#    onto cat's 0 and 1); the spawn moves it back to TCP, its return goes along to cat (exec_returns.h)
#    with the spawner's listener directory, and the spawner closes its copy.
# The servers run as nobody (setpriv from the test's root shell, as sudo -u or runuser would).
# paced_client.py sends 64 KiB every 0.1 s to each at once, until the five returns are seen and rxe
# carried their exchanges for 2 s (PACED_STOP; at most 150 s, as a loaded host took 45 s for the
# returns): every byte echoed in order, and each connection back on RDMA at both ends while it runs,
# its later exchanges crossing rxe.
set -u
shim=$1 rules=$2 bg_rules=$3 role=$4
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
log=$T2R_WORK/shim-$T2R_HOST.log
run() { env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" "$@"; }
run_bg() { env LD_PRELOAD="$shim" TCP2RDMA_RULES="$bg_rules" TCP2RDMA_LOG="$log" "$@"; }
if [ "$role" = a ]; then
  # The servers run as nobody, started by this root shell, which is their ancestor and which they
  # cannot look at: it made none of their connections, so it does not count as holding one.
  touch "$log" && chmod 666 "$log"
  nobody="setpriv --reuid=nobody --regid=nogroup --clear-groups"
  run() { env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" $nobody "$@"; }
  run_bg() { env LD_PRELOAD="$shim" TCP2RDMA_RULES="$bg_rules" TCP2RDMA_LOG="$log" $nobody "$@"; }
  run socat -d -d TCP-LISTEN:5012,fork,reuseaddr EXEC:cat 2> "$T2R_WORK/server-5012.err" &
  servers=$!
  env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" \
    socat -d -d TCP-LISTEN:5014,fork,reuseaddr EXEC:cat,nofork,su=nobody 2> "$T2R_WORK/server-5014.err" &
  servers="$servers $!"
  run python3 "$here/child_uses_once.py" 5015 2> "$T2R_WORK/server-5015.err" &
  run python3 "$here/spawn_cat.py" 5016 2> "$T2R_WORK/server-5016.err" &
  run_bg python3 "$here/fork_late_cat.py" 5024 2> "$T2R_WORK/server-5024.err" &
  run socat -d -d TCP-LISTEN:5013,fork,reuseaddr EXEC:cat,nofork 2> "$T2R_WORK/server-5013.err" &
  servers="$servers $!"
  echo 'exec cat' > /tmp/exec-cat.sh
  run_bg socat -d -d TCP-LISTEN:5023,fork,reuseaddr "EXEC:sh /tmp/exec-cat.sh,nofork" 2> "$T2R_WORK/server-5023.err" &
  servers="$servers $!"
  until [ -f "$T2R_WORK/clients-done" ]; do sleep 0.2; done
  kill $servers 2>/dev/null
  grep 'back on\|other process\|stays\|exec' "$log" | sed 's/^/children-let-go server:   /'
  alone=$(grep -c 'no other process holds the connection any more' "$log")
  back=$(grep -c 'back on rdma' "$log")
  handed=$(grep -c "back on tcp in this program, which the process exec'd with it" "$log")
  spawned=$(grep -c "5016 .*back on tcp in this program, which the process exec'd with it" "$log")
  handed_up=$(grep -c "5023 .*is this program's, which the process exec'd with it" "$log")
  upgraded=$(grep -c '5023 .*upgraded to rdma' "$log")
  spawned_back=$(grep -c "5016 .*back on rdma" "$log")
  late_cat=$(grep -cE "5024 .*(upgraded to rdma|back on rdma)" "$log")
  echo "children-let-go server: $alone connections alone again, $back back on rdma, $handed return handed on at exec;" \
    "5023: $handed_up upgrade handed on at exec, $upgraded upgraded; 5016: $spawned return handed on at" \
    "posix_spawn, $spawned_back back on rdma; 5024: $late_cat on rdma in cat"
  [ "$alone" -ge 3 ] && [ "$back" -ge 5 ] && [ "$handed" -ge 3 ] && [ "$handed_up" -ge 1 ] && [ "$upgraded" -ge 1 ] &&
    [ "$spawned" -ge 1 ] && [ "$spawned_back" -ge 1 ] && [ "$late_cat" -ge 1 ] &&
    ! grep -q "5024 .*stays tcp" "$log"
  exit
fi
sh "$guest/wait-listening.sh" "$T2R_WORK/server-5012.err" 'listening on' &&
  sh "$guest/wait-listening.sh" "$T2R_WORK/server-5013.err" 'listening on' &&
  sh "$guest/wait-listening.sh" "$T2R_WORK/server-5014.err" 'listening on' &&
  sh "$guest/wait-listening.sh" "$T2R_WORK/server-5023.err" 'listening on' &&
  sh "$guest/wait-listening.sh" "$T2R_WORK/server-5015.err" &&
  sh "$guest/wait-listening.sh" "$T2R_WORK/server-5016.err" &&
  sh "$guest/wait-listening.sh" "$T2R_WORK/server-5024.err" || exit 1
status=0
export PACED_STOP=/tmp/clients-stop
run python3 "$here/paced_client.py" "$T2R_PEER" 5012 150 > /tmp/client-5012.out 2>&1 &
clients=$!
run python3 "$here/paced_client.py" "$T2R_PEER" 5013 150 > /tmp/client-5013.out 2>&1 &
clients="$clients $!"
run python3 "$here/paced_client.py" "$T2R_PEER" 5014 150 > /tmp/client-5014.out 2>&1 &
clients="$clients $!"
run python3 "$here/paced_client.py" "$T2R_PEER" 5015 150 child > /tmp/client-5015.out 2>&1 &
clients="$clients $!"
run_bg python3 "$here/paced_client.py" "$T2R_PEER" 5023 150 > /tmp/client-5023.out 2>&1 &
clients="$clients $!"
run python3 "$here/paced_client.py" "$T2R_PEER" 5016 150 > /tmp/client-5016.out 2>&1 &
clients="$clients $!"
run_bg python3 "$here/paced_client.py" "$T2R_PEER" 5024 150 > /tmp/client-5024.out 2>&1 &
clients="$clients $!"
# The path: once all five are back on RDMA (5024 apart: it may come back or be upgraded), their
# exchanges cross rxe (64 KiB each way every 0.1 s).
returned() { grep 'back on rdma' "$log" 2>/dev/null | grep -vc ':5024'; }
waited=0
until [ "$(returned)" -ge 5 ] || [ $waited -ge 600 ]; do sleep 0.1; waited=$((waited + 1)); done
sleep 1  # the last switch's first exchanges
before=$("$guest/rdma-counters")
sleep 2
after=$("$guest/rdma-counters")
touch "$PACED_STOP"
for pid in $clients; do wait "$pid" || status=1; done
cat /tmp/client-5012.out /tmp/client-5013.out /tmp/client-5014.out /tmp/client-5015.out /tmp/client-5023.out \
  /tmp/client-5016.out /tmp/client-5024.out
touch "$T2R_WORK/clients-done"
grep 'back on' "$log" | sed 's/^/children-let-go client:   /'
back=$(returned)
sent=$(printf '%s\n%s\n' "$before" "$after" | awk '$1 == "sent_pkts" { v[n++] = $2 } END { print v[1] - v[0] }')
echo "children-let-go client: $back connections back on rdma, rxe sent $sent packets after the last of them"
[ "$back" -ge 5 ] || status=1
grep -q '5016: .*back on rdma' "$log" || { echo "children-let-go client: 5016 (posix_spawn) not back on rdma"; status=1; }
grep -q '5023: .*upgraded to rdma' "$log" || { echo "children-let-go client: 5023 not upgraded"; status=1; }
grep -qE '5024: .*(upgraded to|back on) rdma' "$log" || { echo "children-let-go client: 5024 not on rdma"; status=1; }
[ "$sent" -ge 300 ] || status=1
sleep 2  # guest a reads the logs
exit $status
