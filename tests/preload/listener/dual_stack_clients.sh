#!/bin/sh
# dual_stack_clients.sh JAVA_CLASSES: the client guest's half of integration.dual_stack.pair,
# with T2R_SHIM and TCP2RDMA_RULES exported and the servers of the other guest ready (app-servers.sh):
#   5050  a JVM ServerSocket bound to 10.77.0.1 (an AF_INET6 socket at ::ffff:10.77.0.1); a JVM NIO
#         client, 16 connections of 2 MiB each way: both ends IPv4-mapped;
#   5051  a Python server on [::] with IPV6_V6ONLY off; 8 IPv4 clients and 8 native IPv6 ones;
#   5052  nginx `listen [::]:5052 ipv6only=off`; curl over IPv4;
#   5053  nginx `listen 5053; listen [::]:5053;` (an IPv4 socket and an IPv6-only one on one port);
#         curl over IPv4 and over IPv6.
# Every echo is compared byte for byte, every file by sha256; each connection must be upgraded at both
# ends (the shims' logs, with the addresses the application saw), rxe must have carried the bytes
# (app-run.sh), and each listener's log line must say where its RDMA listener is.
set -eu
classes=$1
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
client_log=$T2R_WORK/shim-b.log server_log=$T2R_WORK/shim-a.log
fail() { echo "dual_stack_clients: $*"; echo "--- client shim log:"; cat "$client_log"; echo "--- server shim log:"; cat "$server_log"; exit 1; }

[ -f "$classes/DualStackEcho.class" ] ||
  fail "no $classes/DualStackEcho.class: javac was not found when the build was configured (integration/deps.sh testbed installs openjdk-17-jdk-headless)"
sh "$guest/wait-servers.sh"
# nginx's worker makes its own RDMA listener for each of the three listening sockets.
i=0
until [ "$(grep -c 'RDMA listener made in this process' "$server_log" 2>/dev/null)" -ge 3 ]; do
  i=$((i + 1)); [ $i -lt 300 ] || fail "nginx's worker never made its three RDMA listeners"
  sleep 0.1
done

sh "$guest/app-run.sh" 16 1000 java -cp "$classes" DualStackEcho client "$T2R_PEER" 5050 16 2097152
sh "$guest/app-run.sh" 8 500 python3 "$here/dual_stack_echo.py" client "$T2R_PEER" 5051 8 1048576
sh "$guest/app-run.sh" 8 500 python3 "$here/dual_stack_echo.py" client "$T2R_PEER6" 5051 8 1048576
for url in "http://$T2R_PEER:5052/big" "http://$T2R_PEER:5053/big" "http://[$T2R_PEER6]:5053/big"; do
  rm -f /tmp/got
  sh "$guest/app-run.sh" 1 1000 curl -sS -g -o /tmp/got "$url"
  [ "$(sha256sum < /tmp/got | cut -d' ' -f1)" = "$(cat "$T2R_WORK/www-big.sha256")" ] || fail "$url arrived different"
  echo "dual_stack_clients: $url: sha256 equal"
done

# The path, as each end's shim saw it.
v4_self=$(echo "$T2R_SELF" | sed 's/\./\\./g') v4_peer=$(echo "$T2R_PEER" | sed 's/\./\\./g')
count() { grep -c -E "$2" "$1" || true; }
expect_count() {  # FILE WANT REGEX WHAT
  [ "$(count "$1" "$3")" -eq "$2" ] || fail "wanted $2 log lines of $4 ($3), found $(count "$1" "$3")"
}
! grep -q 'stays tcp' "$client_log" || fail "a client connection stayed tcp"
expect_count "$client_log" 16 "client \[::ffff:$v4_self\]:[0-9]+ -> \[::ffff:$v4_peer\]:5050: .*upgraded to rdma" \
  "the JVM's IPv4-mapped connections upgraded"
expect_count "$client_log" 8 "client $v4_self:[0-9]+ -> $v4_peer:5051: .*upgraded to rdma" "IPv4 clients of [::] upgraded"
expect_count "$client_log" 8 "client \[$T2R_SELF6\]:[0-9]+ -> \[$T2R_PEER6\]:5051: .*upgraded to rdma" "IPv6 clients of [::] upgraded"
expect_count "$client_log" 35 "upgraded to rdma" "upgraded client connections in all"
expect_count "$server_log" 1 "listener: RDMA listener at $v4_peer:5050 \(the socket's \[::ffff:$v4_peer\]:5050 is IPv4-mapped\)" \
  "the JVM's listener on the IPv4 address"
expect_count "$server_log" 1 "listener: RDMA listener at \[::\]:5051 for IPv6 and IPv4" "the dual-stack Python listener"
expect_count "$server_log" 1 "listener: RDMA listener at \[::\]:5052 for IPv6 and IPv4" "nginx's dual-stack listener"
expect_count "$server_log" 1 "listener: RDMA listener at \[::\]:5053 for IPv6 only" "nginx's IPv6-only listener"
# The servers upgrade in the background: their last lines may come a moment after the clients ended.
i=0
until [ "$(count "$server_log" 'upgraded to rdma')" -ge 35 ]; do
  i=$((i + 1)); [ $i -lt 300 ] || fail "the servers upgraded $(count "$server_log" 'upgraded to rdma') connections, not 35"
  sleep 0.1
done
! grep -q 'stays tcp' "$server_log" || fail "a server connection stayed tcp"
# What the application saw is what the kernel gives: accept() named the IPv4 clients IPv4-mapped.
python_log=$T2R_WORK/server-python.log
i=0
until [ "$(count "$python_log" "echoed 1048576 bytes to ::ffff:$v4_self\$")" -ge 8 ]; do
  i=$((i + 1)); [ $i -lt 100 ] || { cat "$python_log"; fail "the Python server did not see 8 clients as ::ffff:$T2R_SELF"; }
  sleep 0.1
done
expect_count "$server_log" 16 "server \[::ffff:$v4_peer\]:5050 -> \[::ffff:$v4_self\]:[0-9]+: .*upgraded to rdma" \
  "the JVM server's IPv4-mapped connections upgraded"
expect_count "$server_log" 8 "server \[::ffff:$v4_peer\]:5051 -> \[::ffff:$v4_self\]:[0-9]+: .*upgraded to rdma" \
  "the dual-stack Python server's IPv4-mapped connections upgraded"
expect_count "$server_log" 8 "server \[$T2R_PEER6\]:5051 -> \[$T2R_SELF6\]:[0-9]+: .*upgraded to rdma" \
  "the dual-stack Python server's IPv6 connections upgraded"
echo "dual_stack_clients: JVM, dual-stack Python and nginx servers: every connection on RDMA, every byte exact"
