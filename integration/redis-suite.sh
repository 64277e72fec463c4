#!/usr/bin/env bash
# redis-suite.sh: redis's own test suite (its external-server mode) against a redis-server under the
# module, on a port the rules put on RDMA and on one they leave on TCP, in the pair VMs. The suite's
# clients (tclsh, and the redis-cli and redis-benchmark some units start) run under the module in
# guest B, the servers in guest A with their built-in snapshot settings, so the suite's BGSAVEs,
# DEBUG RELOADs and snapshots fork a server whose connections are on RDMA. Passes when every test
# has the same outcome on both ports (one that differs is run again alone on both, and counts only
# if it differs again: some tests time themselves), no run stops on an exception, and the suite's
# connections went on RDMA (the client's log) with rxe carrying them. A check, not a timed test: about
# an hour on the emulated testbed (TCP about 30 minutes, RDMA 35), outside the suite's budget
# (docs/testbed.md).
# REDIS_SUITE_ARGS: more runtest arguments, such as --single unit/type/list for one unit.
# The suite comes from Debian's source package of the installed redis (testbed/redis-tests.sh).
# Left out (integration/redis-suite.skip), each failing the same without the module: one test that
# needs the server's pid (redis 7.0.15's suite does not tag it for external mode), and one that
# moves the server to a port it holds on its own host (another guest here), after which every later
# test finds no server.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lib=${TCP2RDMA_LIB:-$root/build/preload/libtcp2rdma.so}
[ -f "$lib" ] || { echo "no $lib: build first (integration/test-all or cmake --build build)" >&2; exit 1; }
"$root/integration/deps.sh" testbed redis-suite
suite=$("$root/integration/testbed/redis-tests.sh")
rules=$root/integration/rules/redis-rdma.yaml
skips=$root/integration/redis-suite.skip
base=$(mktemp -d /var/tmp/redis-suite.XXXXXX)
work=$base/work  # vm empties it first
run="sh $root/integration/guest/redis-suite-run.sh $lib $rules $suite $skips"
set +e
"$root/integration/vm" pair --timeout "${REDIS_SUITE_TIMEOUT:-5400}" --mem 1536 --work "$work" \
  --share "$(dirname "$(dirname "$lib")")" --share "$suite" "$run server" "$run client ${REDIS_SUITE_ARGS:-}" > "$base/vm.out" 2>&1
status=$?
set -e
echo "redis-suite: redis $(dpkg-query -W -f='${Version}' redis-tools)'s test suite, external mode, two Soft-RoCE VMs, $(date -u +%F), commit $(git -C "$root" rev-parse --short HEAD), host $(nproc) cores"
grep -E '^\[[ab]\] result' "$base/vm.out" | sed 's/^\[[ab]\] result //'
echo "redis-suite: logs in $work and $base/vm.out (suite-tcp.log, suite-rdma.log, outcomes.diff, shim-a.log, shim-b.log)"
if [ $status -ne 0 ]; then
  echo "redis-suite: FAILED (status $status)" >&2
  tail -n 40 "$base/vm.out" >&2
  exit $status
fi
echo "redis-suite: passed"
