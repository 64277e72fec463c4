#!/usr/bin/env bash
# Prepares the Soft-RoCE guest in a cache directory and prints that directory:
#   vmlinuz      Debian's own linux-image-amd64 kernel (it ships rdma_rxe; the host kernel is never touched)
#   initrd.gz    busybox, the modules the guest needs (dependencies resolved by modprobe), and our init
#   kver         the kernel version
# The cache key includes the kernel package version and a hash of init, so a change to either rebuilds.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ "$(id -u)" -eq 0 ]; then default_cache=/var/cache/tcp2rdma/softroce
else default_cache=${XDG_CACHE_HOME:-$HOME/.cache}/tcp2rdma/softroce; fi
cache=${TCP2RDMA_VM_CACHE:-$default_cache}
mkdir -p "$cache"

# Top-level modules; modprobe adds their dependencies in load order. crc32_generic is nobody's declared
# dependency, yet without it rxe cannot compute its ICRC and `rdma link add` fails. tcp_diag (with
# inet_diag): sock_diag for `ss -ti` and `tcp2rdma stat`, which read TCP connections' byte counts there.
# sch_prio and cls_u32: a fault that drops only some of a guest's frames (tests/preload/back_to_tcp/
# fault_agent.sh, kill-after-record). virtio_rng: the host's entropy (vm's virtio-rng-pci), without which
# the kernel's random pool became ready only 1 to 5 s after boot, and the first getrandom(2) of a guest
# (a stream's nonce, python's start) waited for it.
modules=(virtio_pci 9pnet_virtio 9p virtio_net crc32_generic rdma_rxe rdma_ucm ib_uverbs dummy veth sch_netem tcp_diag
         sch_prio cls_u32 virtio_rng)

fetch_kernel() {
  local pkg="$1" dir="$2"
  local tmp; tmp=$(mktemp -d "$cache/fetch.XXXXXX")
  echo "testbed: downloading $pkg into $dir (once)" >&2
  (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1) || {
    (apt-get update -qq && cd "$tmp" && apt-get download "$pkg" >/dev/null) ||
      { echo "testbed: cannot download $pkg with apt-get" >&2; rm -rf "$tmp"; exit 1; }
  }
  dpkg-deb -x "$tmp"/*.deb "$tmp/root"
  rm -f "$tmp"/*.deb
  rm -rf "$dir"; mv "$tmp" "$dir"
}

build_initrd() {
  local kdir="$1" kver="$2" out="$3"
  local moddir; moddir=$(dirname "$(find "$kdir/root" -maxdepth 3 -type d -path "*/modules/$kver")")
  local base=${moddir%/lib/modules}; base=${base%/usr}   # root dir that modprobe -d expects
  [ -f "$moddir/$kver/modules.dep" ] || depmod -b "$base" "$kver"
  local r; r=$(mktemp -d); trap 'rm -rf "$r"' RETURN
  mkdir -p "$r"/{bin,proc,sys,dev,host,mods}
  cp /bin/busybox "$r/bin/"
  for a in sh mount umount insmod mkdir sed cat chroot poweroff sleep echo setsid cttyhack; do
    ln -s busybox "$r/bin/$a"; done
  # --show-depends prints "insmod /path/x.ko" in load order, or "builtin x" for what needs no loading.
  local n=0
  modprobe -d "$base" -S "$kver" -a --show-depends "${modules[@]}" | awk '$1=="insmod"{print $2}' |
    awk '!seen[$0]++' | while read -r ko; do
      n=$((n + 1)); local name; name=$(printf '%02d-%s' "$n" "$(basename "$ko")")
      cp "$ko" "$r/mods/$name"
    done
  cp "$here/init" "$r/init"; chmod +x "$r/init"
  (cd "$r" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$out.tmp"
  mv "$out.tmp" "$out"
}

# One preparation at a time: VM tests that start side by side would build the same initramfs.
exec {cache_lock}> "$cache/.lock"
flock "$cache_lock"

pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if [ -z "$pkg" ]; then
  apt-get update -qq 2>/dev/null || true
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
fi
if [ -z "$pkg" ]; then
  # Offline with a warm cache: use what is there.
  pkg=$(cd "$cache" && ls -d linux-image-* 2>/dev/null | tail -n 1)
  [ -n "$pkg" ] || { echo "testbed: cannot find Debian's linux-image-amd64 (run apt-get update)" >&2; exit 1; }
fi
kdir="$cache/$pkg"
[ -d "$kdir/root" ] || fetch_kernel "$pkg" "$kdir"
kver=${pkg#linux-image-}
initrd="$kdir/initrd-$(cat "$here/init" "$0" | md5sum | cut -c1-12).gz"
[ -f "$initrd" ] || { rm -f "$kdir"/initrd-*.gz; build_initrd "$kdir" "$kver" "$initrd"; }
ln -sf "$(find "$kdir/root/boot" -name 'vmlinuz-*' | head -n 1)" "$kdir/vmlinuz"
ln -sf "$initrd" "$kdir/initrd.gz"
echo "$kver" > "$kdir/kver"
echo "$kdir"
