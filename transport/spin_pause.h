// What a spin does between two polls of a completion queue (LinkProgress::wait, an event loop's spin
// in epoll_wait.cpp, a poll or select call's in poll_spin.cpp). On a software device (Soft-RoCE) the
// adapter's work runs on this host's CPUs, maybe on the one the spin holds: the spin gives the CPU
// away, a sched_yield a poll. On a NIC the
// completion comes without our CPU, and a yield would be a system call a poll for nothing: a pause
// instruction only (it tells the core, and a hyperthread sibling, that this is a spin).
#pragma once

#include <sched.h>

namespace tcp2rdma::transport {

inline void spin_pause(bool yield) {
  if (yield) {
    sched_yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How many polls a spin makes between two looks at the caller's kernel descriptors (and at the clock,
// a system call in some guests): a poll that yields takes as long as a look, one that does not a
// fraction of a microsecond.
inline unsigned polls_per_look(bool yield) { return yield ? 4 : 64; }

}  // namespace tcp2rdma::transport
