#!/bin/sh
# doctor_guest.sh TCP2RDMA: `tcp2rdma doctor` in the Soft-RoCE loop guest. The working guest passes
# (exit 0, with a route to the peer over IPv4 and IPv6) and fails only the peer check for a peer no
# interface routes; a user under Debian's default memory lock limit passes with 80 connections, one
# under `ulimit -l 64` fails memlock; a rule whose local block holds no RoCE address warns; the guest
# without rxe0 fails devices. Every run's output is
# printed, so that a failure shows what doctor said.
set -u
tool=$1

fail() {
  echo "doctor_guest: $*"
  exit 1
}

# run LABEL EXPECTED_STATUS COMMAND...: runs it, prints its output, leaves it in $out.
run() {
  label=$1 expected=$2
  shift 2
  echo "== $label"
  out=$("$@" 2>&1)
  status=$?
  echo "$out"
  [ "$status" -eq "$expected" ] || fail "$label: exit status $status, expected $expected"
}

has() { echo "$out" | grep -q "$1" || fail "no line matching '$1'"; }

run "root, --peer $T2R_PEER" 0 "$tool" doctor --peer "$T2R_PEER"
for check in devices ports addresses "device files" rdma_cm module rules peer; do has "^ok    $check: "; done
has "^ok    devices: rxe0 (1 port, software: runs on this host's CPUs)"
has "^ok    addresses: .*$T2R_PEER (rxe0 port 1, GID [0-9]*, RoCE v2)"
has "^ok    peer: $T2R_PEER resolves through rxe0 port 1, source GID ::ffff:$T2R_PEER"

run "root, --json --peer $T2R_PEER6" 0 "$tool" doctor --json --peer "$T2R_PEER6"
has '"name":"peer","status":"ok"'
has '"ok":true}$'

# An address no interface routes (TEST-NET-1): nothing is sent, and the peer check says why.
run "root, --peer 192.0.2.1" 1 "$tool" doctor --peer 192.0.2.1
has "^ok    devices: "
has "^FAIL  peer: .*192.0.2.1.* -- fix: "

# Debian's default limit for a user, with the example rules (two select RDMA, the larger with 4 MiB
# rings): the count the transport's sizing gives, and how far rings may grow.
run "nobody, ulimit -l 8192, example rules" 0 sh -c 'ulimit -l 8192 && exec setpriv --reuid=nobody --regid=nogroup \
  --clear-groups --inh-caps=-all "$0" doctor --rules "$1"' "$tool" "$T2R_SOURCE_DIR/config/rules.example.yaml"
has "^ok    memlock: RLIMIT_MEMLOCK 8 MiB, no CAP_IPC_LOCK: about 149 connections fit on RDMA at once (32 KiB rings, .*; the later ones 8 KiB rings)"
has "rings grow to at most 128 KiB, not to the rules' 4 MiB"
has "^ok    rules: .*rules.example.yaml (--rules): 3 rules, 2 select RDMA (iperf3-over-rdma, storage-network)$"

# Rules whose RDMA connections must use local addresses: one block holds the guest's RoCE address, the
# other none (a warning: those connections would stay TCP here).
printf '%s\n' 'version: 1' 'rules:' '  - name: lab' '    match: {local: 10.77.0.0/24}' '    transport: rdma' \
  '  - name: elsewhere' '    match: {local: 10.99.0.0/16}' '    transport: rdma' > /tmp/local-rules.yaml
run "root, rules naming local addresses" 0 "$tool" doctor --rules /tmp/local-rules.yaml
has "^warn  rule addresses: no address RoCE has a GID for in elsewhere: local 10.99.0.0/16: .*; GIDs in lab: local 10.77.0.0/24 (10.77.0.1)$"

# Lowered as root, then handed to nobody: the uid change drops every capability, CAP_IPC_LOCK too.
run "nobody, ulimit -l 64" 1 sh -c 'ulimit -l 64 && exec setpriv --reuid=nobody --regid=nogroup --clear-groups \
  --inh-caps=-all "$0" doctor' "$tool"
has "^FAIL  memlock: RLIMIT_MEMLOCK 64 KiB, no CAP_IPC_LOCK: not one connection fits on RDMA .* -- fix: .*ulimit -l"

rdma link delete rxe0 || fail "cannot delete rxe0"
run "rxe0 deleted" 1 "$tool" doctor
has "^FAIL  devices: no RDMA device -- fix: "
echo "doctor_guest: every run judged as expected"
