#!/usr/bin/env bash
# accel.sh KERNEL_DIR: prints QEMU's -accel argument for the guests: kvm only when a guest has been
# seen to boot under it on this machine, else tcg.
#
# A writable /dev/kvm proves nothing: on some hosts (nested virtualisation without vmx/svm passed
# through) KVM opens, QEMU warns about missing CPUID features, and the guest never prints a line.
# So the first use on a machine boots the guest kernel under KVM with a short deadline and no root
# file system: a working KVM reaches the kernel's "VFS: Unable to mount root fs" panic in a second or
# two, and -no-reboot ends QEMU there. The verdict is kept in the kernel's cache directory, keyed by
# the host's kernel, CPU flags and QEMU version, so the probe costs seconds once per machine, not per
# test. TCP2RDMA_VM_ACCEL=kvm|tcg forces either (no probe). For tests of the probe itself:
# TCP2RDMA_KVM_DEVICE (default /dev/kvm) and TCP2RDMA_KVM_PROBE_SECONDS (default 10).
set -euo pipefail
kdir=$1
tcg=tcg,thread=multi

case "${TCP2RDMA_VM_ACCEL:-}" in
  kvm) echo kvm; exit 0 ;;
  tcg) echo "$tcg"; exit 0 ;;
  "") ;;
  *) echo "vm: TCP2RDMA_VM_ACCEL must be kvm or tcg, not '$TCP2RDMA_VM_ACCEL'" >&2; exit 2 ;;
esac
kvm_device=${TCP2RDMA_KVM_DEVICE:-/dev/kvm}
deadline=${TCP2RDMA_KVM_PROBE_SECONDS:-10}
if [ ! -w "$kvm_device" ]; then echo "$tcg"; exit 0; fi

key=$({ uname -r; grep -m1 '^flags' /proc/cpuinfo; qemu-system-x86_64 --version | head -n1; } | md5sum | cut -c1-12)
verdict="$kdir/accel-$key"
if [ ! -f "$verdict" ]; then
  out=$(mktemp)
  # 10 s: several times what a working KVM needs (about a second), and paid once per machine.
  timeout -k 2 "$deadline" qemu-system-x86_64 -accel kvm -smp 1 -m 256 -nographic -no-reboot -nic none \
    -kernel "$kdir/vmlinuz" -append "console=ttyS0 panic=-1 root=/dev/nonexistent" \
    < /dev/null > "$out" 2>&1 || true
  if grep -q -e 'Kernel panic' -e 'VFS: Unable to mount root' "$out"; then
    echo kvm > "$verdict.tmp"
  else
    echo "$tcg" > "$verdict.tmp"
    { echo "vm: $kvm_device is present but a guest did not boot under KVM within $deadline s; using TCG on this" \
           "machine from now on (remembered in $verdict; TCP2RDMA_VM_ACCEL=kvm|tcg overrides)"
      { grep -v '^$' "$out" || true; } | head -n 3 | sed 's/^/vm:   qemu: /'; } >&2  # it may say nothing
  fi
  mv "$verdict.tmp" "$verdict"
  rm -f "$out"
fi
cat "$verdict"
