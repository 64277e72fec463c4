#!/usr/bin/env bash
# bench-transport.sh [ROUNDS]: tcp2rdma's transport against perftest on the same Soft-RoCE device, in
# one loop VM run (one guest, client and server both inside it, rxe on dummy0).
#   throughput: stream_bench bw (64 KiB and 1 MiB writes)  vs  ib_write_bw (same message sizes)
#   latency:    stream_bench lat (64 B ping-pong, half RTT) vs  ib_send_lat (64 B, t_typical and t_avg)
# Each measurement runs ROUNDS times (default 3), interleaved with its reference so that drift hits
# both alike; the table shows medians and the ratios. Goals: throughput >= 0.9 x
# ib_write_bw at 64 KiB, latency <= 1.3 x ib_send_lat.
# Environment: BENCH_ZCOPY_THRESHOLD, BENCH_BUSY_POLL_US and BENCH_BUSY_POLL_YIELD (on or off; unset:
# on a software device only) are passed to stream_bench.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=${1:-3}
build=${TCP2RDMA_BUILD_DIR:-$root/build}
bench=$build/tests/transport/stream_bench
[ -x "$bench" ] || { echo "no $bench: build first (integration/test-all or cmake --build build)" >&2; exit 1; }
work=$(mktemp -d /var/tmp/tcp2rdma-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
envs="BENCH_ZCOPY_THRESHOLD=${BENCH_ZCOPY_THRESHOLD:-} BENCH_BUSY_POLL_US=${BENCH_BUSY_POLL_US:-} BENCH_BUSY_POLL_YIELD=${BENCH_BUSY_POLL_YIELD:-}"
envs=$(echo "$envs" | tr ' ' '\n' | grep -v '=$' | tr '\n' ' ' || true)

# The guest script: every line of results it prints starts with "R ". Its directory is shared with the
# guest: integration/vm covers the rest of this private (mode 700) directory.
mkdir -p "$work/guest"
cat > "$work/guest/guest.sh" <<EOF
port=7800
ib_bw() { # SIZE COUNT -> MB/s
  ib_write_bw -d rxe0 -p \$port -s \$1 -n \$2 >/dev/null 2>&1 & sleep 1
  ib_write_bw -d rxe0 -p \$port -s \$1 -n \$2 \$T2R_PEER | awk '/^ *[0-9]+ +[0-9]+ /{print \$4}'
  wait; port=\$((port + 1))
}
ib_lat() { # -> t_typical t_avg
  ib_send_lat -d rxe0 -p \$port -s 64 -n 3000 >/dev/null 2>&1 & sleep 1
  ib_send_lat -d rxe0 -p \$port -s 64 -n 3000 \$T2R_PEER | awk '/^ *64 +[0-9]+ /{print \$5, \$6}'
  wait; port=\$((port + 1))
}
ours() { # MODE SIZE COUNT -> the client's line
  env $envs $bench server \$port \$1 \$2 \$3 & sleep 0.3
  env $envs $bench client \$T2R_PEER \$port \$1 \$2 \$3
  wait; port=\$((port + 1))
}
for round in \$(seq $rounds); do
  echo "R ib_write_bw_64k \$(ib_bw 65536 3000)"
  echo "R ours_bw_64k \$(ours bw 65536 3000 | sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p')"
  echo "R ib_write_bw_1m \$(ib_bw 1048576 200)"
  echo "R ours_bw_1m \$(ours bw 1048576 200 | sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p')"
  echo "R ib_send_lat \$(ib_lat)"
  echo "R ours_lat \$(ours lat 64 3000 | sed -n 's/.*average \([0-9.]*\) us, median \([0-9.]*\) us.*/\2 \1/p')"
done
EOF
"$root/integration/vm" loop --timeout $((rounds * 200 + 60)) --work "$work/vm" --share "$work/guest" "sh $work/guest/guest.sh" > "$work/out.log" 2>&1 || {
  cat "$work/out.log"; echo "bench-transport: the VM run failed" >&2; exit 1; }

median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else print v[int((NR + 1) / 2)]}'; }
col() { grep "^R $1 " "$work/out.log" | awk -v c="$2" '{print $(2 + c)}' | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }'; }

bw64_ib=$(col ib_write_bw_64k 1); bw64=$(col ours_bw_64k 1)
bw1m_ib=$(col ib_write_bw_1m 1); bw1m=$(col ours_bw_1m 1)
lat_typ=$(col ib_send_lat 1); lat_avg=$(col ib_send_lat 2)
ours_med=$(col ours_lat 1); ours_avg=$(col ours_lat 2)
echo "bench-transport: $(date -u +%Y-%m-%d), $(nproc) host cores, loop VM (2 vCPU, TCG), medians of $rounds rounds ${envs:+($envs)}"
echo
echo "| what | reference | tcp2rdma | ratio |"
echo "| --- | --- | --- | --- |"
echo "| throughput, 64 KiB writes vs ib_write_bw 64 KiB | $bw64_ib MB/s | $bw64 MB/s | $(ratio "$bw64" "$bw64_ib") |"
echo "| throughput, 1 MiB writes vs ib_write_bw 1 MiB | $bw1m_ib MB/s | $bw1m MB/s | $(ratio "$bw1m" "$bw1m_ib") |"
echo "| latency 64 B, median half RTT vs ib_send_lat t_typical | $lat_typ µs | $ours_med µs | $(ratio "$ours_med" "$lat_typ") |"
echo "| latency 64 B, average half RTT vs ib_send_lat t_avg | $lat_avg µs | $ours_avg µs | $(ratio "$ours_avg" "$lat_avg") |"
