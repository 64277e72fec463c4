#!/bin/sh
# as_nobody.sh MEMLOCK_KIB CMD [ARG...]: runs CMD as nobody without capabilities (root's CAP_IPC_LOCK
# would lift the memory lock limit), with RLIMIT_MEMLOCK MEMLOCK_KIB (Debian's default for a user is
# 8192) and the module's log in /tmp/shim-nobody.log (the shared work directory is root's).
limit=$1
shift
exec setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all \
  sh -c 'ulimit -l "$0" && exec env TCP2RDMA_LOG=/tmp/shim-nobody.log "$@"' "$limit" "$@"
