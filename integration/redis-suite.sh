#!/usr/bin/env bash
# redis-suite.sh: redis's own test suite (its external-server mode) against a redis-server under the
# module, on a port the rules put on RDMA and on one they leave on TCP, in the pair VMs. The suite's
# clients (tclsh, and the redis-cli and redis-benchmark some units start) run under the module in
# guest B, the servers in guest A with their built-in snapshot settings, so the suite's BGSAVEs,
# DEBUG RELOADs and snapshots fork a server whose connections are on RDMA. Passes when the suite
# passes on both ports with the same outcome for every test, every client connection to the RDMA
# port went on RDMA (the client's log) and rxe carried the traffic. A check, not a timed test: about
# 40 minutes on the emulated testbed, outside the suite's budget (docs/testbed.md).
# REDIS_SUITE_ARGS: more runtest arguments, such as --single unit/type/list for one unit.
# The suite comes from Debian's source package of the installed redis (testbed/redis-tests.sh).
# Left out (integration/redis-suite.skip): the tests that need the server's pid or its files, which
# external mode cannot give, and fail the same without the module.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lib=${TCP2RDMA_LIB:-$root/build/preload/libtcp2rdma.so}
[ -f "$lib" ] || { echo "no $lib: build first (integration/test-all or cmake --build build)" >&2; exit 1; }
"$root/integration/deps.sh" testbed
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
