#!/usr/bin/env bash
# Installs, with apt and only when missing, the Debian packages a named part of the project needs.
#   deps.sh build     compilers and -dev packages to build tcp2rdma and its tests
#   deps.sh testbed   QEMU and what the Soft-RoCE VM runs (rdma-core tools, perftest, test applications)
#   deps.sh redis-suite   tcl, which runs redis's own test suite (integration/redis-suite.sh)
# Idempotent and quick when everything is present: it asks dpkg first and runs apt only for what is missing.
set -euo pipefail

build_pkgs=(cmake ninja-build g++ pkg-config libibverbs-dev librdmacm-dev libyaml-cpp-dev libgtest-dev)
# The guest runs the host's own binaries (its root is shared over 9p), so test tools are installed here.
testbed_pkgs=(qemu-system-x86 busybox-static cpio kmod iproute2 rdma-core ibverbs-utils rdmacm-utils
              perftest iperf3 iperf netcat-openbsd sockperf redis-tools nginx-light curl util-linux procps
              python3 openjdk-17-jdk-headless wrk memcached libmemcached-tools postgresql-15 strace
              linux-perf socat openbsd-inetd rsync)

missing=()
for part in "$@"; do
  case "$part" in
    build) pkgs=("${build_pkgs[@]}") ;;
    testbed) pkgs=("${testbed_pkgs[@]}") ;;
    redis-suite) pkgs=(tcl) ;;
    *) echo "deps.sh: unknown part '$part' (build, testbed, redis-suite)" >&2; exit 2 ;;
  esac
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "deps.sh: missing packages: ${missing[*]}; run as root or install them with apt-get" >&2
  exit 1
fi
echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# The tests run nginx themselves, inside the VM: installing it must not start a web server on this
# host. policy-rc.d (Debian's switch for that) says no for the duration, unless one is already there.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\n# tcp2rdma deps.sh: no service starts while it installs\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
