# Sourced by the integration/bench-*.sh scripts that run a server guest and a client guest:
# bench_pair NAME SERVERS CLIENT [BEFORE [AFTER]] runs `vm pair` with the module's build tree shared,
# guest A starting the servers SERVERS names (app-servers.sh arguments) under the module, guest B
# running CLIENT; BEFORE runs on A first, in the same shell (a limit it sets applies to the servers),
# AFTER once the servers are done (lines it prints that start with "server " are reported). Then it
# prints the client's result lines and those server lines (and, on failure, the run's tail) and
# returns the run's status. Expects $root, $lib and $rules set, and $title (the first line printed);
# $work, when set, is the guests' work directory (the shim's logs), else a temporary one.
bench_pair() {
  local name=$1 servers=$2 client=$3 before=${4:-true} after=${5:-true} out status
  out=$(mktemp)
  set +e
  "$root/integration/vm" pair ${work:+--work "$work"} --timeout 1800 --share "$(dirname "$(dirname "$lib")")" \
    "$before && ulimit -Hn 1048576; ulimit -Sn 65536; env T2R_SHIM=$lib TCP2RDMA_RULES=$rules sh $root/integration/guest/app-servers.sh $servers; $after" \
    "$client" > "$out" 2>&1
  status=$?
  set -e
  echo "$title"
  grep -E '^\[b\] (result|calls|  why|  rings|failed|client )' "$out" | sed 's/^\[b\] //'
  grep -E '^\[a\] server ' "$out" | sed 's/^\[a\] //' || true
  if [ $status -ne 0 ]; then
    echo "$name: the run failed (status $status); its output:" >&2
    tail -n 60 "$out" >&2
  fi
  rm -f "$out"
  return $status
}

# The module to measure (TCP2RDMA_LIB, default the build tree's) and the rule file (BENCH_RULES,
# default $1), as absolute paths in $lib and $rules.
# BENCH_POLL_YIELD (auto, on or off) sets busy_poll_yield in every rule of a copy of that file, in the
# build tree the guests share (docs/rules.md).
bench_module_and_rules() {
  lib=${TCP2RDMA_LIB:-$root/build/preload/libtcp2rdma.so}
  [ -f "$lib" ] || { echo "no $lib: build first (integration/test-all or cmake --build build)" >&2; exit 1; }
  rules=${BENCH_RULES:-$1}
  rules=$(cd "$(dirname "$rules")" && pwd)/$(basename "$rules")
  if [ -n "${BENCH_POLL_YIELD:-}" ]; then
    local copy
    copy="$(dirname "$(dirname "$lib")")/bench-rules/$(basename "$rules" .yaml)-yield-$BENCH_POLL_YIELD.yaml"
    mkdir -p "$(dirname "$copy")"
    # Each rule's `transport:` line, at its indentation, gains a busy_poll_yield line after it.
    sed -E "s/^( +)transport: (.*)$/&\n\1busy_poll_yield: $BENCH_POLL_YIELD/" "$rules" > "$copy"
    rules=$copy
  fi
}
