// The real libc functions behind every call libtcp2rdma.so intercepts, resolved with dlsym(RTLD_NEXT).
#pragma once

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

namespace tcp2rdma::preload {

// One pointer per intercepted call, named after it. A pointer is null only when this libc lacks the
// call (epoll_pwait2 before glibc 2.35, say); wrappers then fail with ENOSYS like a missing syscall.
struct RealCalls {
#define T2R_CALL(ret, name, params) ret(*name) params;
#include "libc/intercepted_calls.def"
#undef T2R_CALL
};

// Resolves on first use: other libraries' constructors can call into us before ours has run.
// Safe to call from any thread; resolution is idempotent and every racer stores the same values.
const RealCalls& real();

}  // namespace tcp2rdma::preload
