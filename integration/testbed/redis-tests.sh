#!/usr/bin/env bash
# Prints a directory that holds redis's own test suite (runtest, tests/) for the redis that Debian
# installed here (redis-tools: the same binary serves as redis-server), fetching it once.
# The suite is not in any binary package, so it comes from Debian's source package of the same
# version: a private apt source list (deb-src lines for the system's Debian suites, the system's own
# keys check them), apt-get source --download-only, and the upstream tarball's runtest and tests/
# unpacked. The system's apt configuration is never changed. Cached next to the testbed's kernel.
set -euo pipefail

if [ "$(id -u)" -eq 0 ]; then default_cache=/var/cache/tcp2rdma
else default_cache=${XDG_CACHE_HOME:-$HOME/.cache}/tcp2rdma; fi
cache=${TCP2RDMA_REDIS_TESTS_CACHE:-$default_cache/redis-tests}
mkdir -p "$cache"

version=$(dpkg-query -W -f='${Version}' redis-tools 2>/dev/null) ||
  { echo "redis-tests: redis-tools is not installed (integration/deps.sh testbed)" >&2; exit 1; }
dir="$cache/${version//[:~]/_}"
exec {lock}> "$cache/.lock"
flock "$lock"
if [ -x "$dir/runtest" ] && [ -d "$dir/tests/unit" ]; then echo "$dir"; exit 0; fi

tmp=$(mktemp -d "$cache/fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "redis-tests: fetching Debian's redis source $version for its test suite (once)" >&2
codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
mkdir -p "$tmp/lists/partial" "$tmp/src"
cat > "$tmp/sources.list" <<EOF
deb-src http://deb.debian.org/debian $codename main
deb-src http://deb.debian.org/debian $codename-updates main
deb-src http://deb.debian.org/debian-security $codename-security main
EOF
apt_opts=(-q -o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/nonexistent
          -o "Dir::State::Lists=$tmp/lists" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$tmp/src" && apt-get "${apt_opts[@]}" source --download-only "redis=$version" >/dev/null)
orig=$(ls "$tmp"/src/redis_*.orig.tar.* 2>/dev/null | head -n 1)
[ -n "$orig" ] || { echo "redis-tests: no upstream tarball in the source package" >&2; exit 1; }
mkdir -p "$tmp/out"
tar -xf "$orig" -C "$tmp/out" --strip-components=1 --wildcards '*/runtest' '*/tests/*'
[ -x "$tmp/out/runtest" ] || { echo "redis-tests: the tarball has no runtest" >&2; exit 1; }
rm -rf "$dir"; mv "$tmp/out" "$dir"
echo "$dir"
