#!/usr/bin/env bash
# accel_probe.sh ACCEL_SH: the testbed's choice of accelerator (integration/testbed/accel.sh), with a
# stand-in QEMU on PATH and a writable file for /dev/kvm. A KVM that never boots a guest (the stand-in
# sleeps, as QEMU does on a host without vmx/svm) must give TCG within the probe's deadline, say so in
# one line, and be remembered (no second probe, no second line); one that boots gives KVM; the
# environment forces either without a probe.
set -euo pipefail
accel=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/broken" "$tmp/working"
touch "$tmp/kvm"
fail() { echo "accel_probe: $*" >&2; exit 1; }

fake_qemu() { # BEHAVIOUR: sleep (never boots) or panic (boots to the root-mount panic)
  cat > "$tmp/bin/qemu-system-x86_64" <<EOS
#!/bin/sh
case "\$*" in *--version*) echo "QEMU emulator version 0.0 (stand-in $1)"; exit 0 ;; esac
echo probe >> "$tmp/probes"
[ "$1" = sleep ] && exec sleep 1000
echo "Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)"
EOS
  chmod +x "$tmp/bin/qemu-system-x86_64"
}
probe() { # KDIR: prints the choice; stderr to $tmp/err
  PATH="$tmp/bin:$PATH" TCP2RDMA_VM_ACCEL= TCP2RDMA_KVM_DEVICE="$tmp/kvm" TCP2RDMA_KVM_PROBE_SECONDS=2 \
    "$accel" "$1" 2> "$tmp/err"
}

fake_qemu sleep
start=$SECONDS
got=$(probe "$tmp/broken") || { cat "$tmp/err"; fail "accel.sh failed (a QEMU that says nothing)"; }
[ "$got" = tcg,thread=multi ] || fail "a KVM that never boots gave '$got', not tcg"
[ $((SECONDS - start)) -le 8 ] || fail "the probe took $((SECONDS - start)) s"
[ "$(grep -c 'using TCG' "$tmp/err")" -eq 1 ] || { cat "$tmp/err"; fail "no single line saying why TCG"; }
got=$(probe "$tmp/broken") || fail "accel.sh failed the second time"
[ "$got" = tcg,thread=multi ] || fail "the remembered verdict gave '$got'"
[ ! -s "$tmp/err" ] || { cat "$tmp/err"; fail "the remembered verdict spoke again"; }
[ "$(wc -l < "$tmp/probes")" -eq 1 ] || fail "probed $(wc -l < "$tmp/probes") times, not once"

fake_qemu panic
got=$(probe "$tmp/working") || { cat "$tmp/err"; fail "accel.sh failed (a KVM that boots)"; }
[ "$got" = kvm ] || fail "a KVM that boots gave '$got', not kvm"

rm -f "$tmp/probes"
got=$(PATH="$tmp/bin:$PATH" TCP2RDMA_VM_ACCEL=tcg TCP2RDMA_KVM_DEVICE="$tmp/kvm" "$accel" "$tmp/forced")
[ "$got" = tcg,thread=multi ] && [ ! -f "$tmp/probes" ] || fail "TCP2RDMA_VM_ACCEL=tcg did not force tcg"
got=$(PATH="$tmp/bin:$PATH" TCP2RDMA_VM_ACCEL=kvm TCP2RDMA_KVM_DEVICE=/nonexistent "$accel" "$tmp/forced")
[ "$got" = kvm ] || fail "TCP2RDMA_VM_ACCEL=kvm did not force kvm"
echo "accel_probe: a KVM that never boots gives TCG in $((SECONDS - start)) s or less, once; one that boots gives KVM"
