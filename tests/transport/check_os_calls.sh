#!/bin/sh
# check_os_calls.sh "CALL;CALL;..." LIB...: no object in the static libraries LIB references one of the
# calls libtcp2rdma.so interposes. Such a reference would run the module's own wrapper from inside
# the transport (transport/os_calls.h says why that must not happen).
calls=$1
shift
want=$(printf '%s\n' "$calls" | tr ';' '\n' | sed '/^$/d' | sort -u)
status=0
for lib in "$@"; do
  used=$(nm -u --format=just-symbols "$lib" | sed 's/@.*//' | sort -u)
  bad=$(printf '%s\n%s\n' "$want" "$used" | sort | uniq -d)
  if [ -n "$bad" ]; then
    echo "$lib references interposed calls directly (use transport::os()):"
    printf '  %s\n' $bad
    nm -A -u "$lib" | grep -w -F "$(printf '%s\n' $bad)" | sed 's/^/    /'
    status=1
  else
    echo "$lib: no direct reference to an interposed call"
  fi
done
exit $status
