// A poll or select call's spin before it sleeps (interpose/poll.cpp), as an event loop's epoll_wait
// spins (epoll_wait.cpp): the links of the call's streams polled for up to their rule's `busy_poll`,
// so that a reply which comes within it costs no arming, no sleep and no event to read. The looks
// before the spin leave the links unarmed (a completion the spin takes from an armed queue still
// raises the event, which the next sleep would find at once); the looks after it arm them.
//
// Only a fixed `busy_poll` spins here; `adaptive` does not. Measured (docs/benchmarks.md: sockperf's
// client in poll() in the pair): the adaptive budget of an event loop (spin_budget.h), kept per thread
// for poll, cost 1.1 system calls more a round trip in yields than it saved in sleeps, at a lower rate.
#pragma once

#include <poll.h>

#include <cstddef>

#include "deadline.h"
#include "readiness/polled_streams.h"

namespace tcp2rdma::preload {

class PollSpin {
 public:
  enum class End {
    kNone,    // no spin (the rule says none, or the budget is down to none)
    kNews,    // news for a stream of the call: look again
    kKernel,  // a descriptor the kernel reports on is ready: the sleep returns at once
    kNothing, // the spin ran out
  };

  // Whether this call's looks should leave the links unarmed for a spin: the thread's last call found
  // a fixed rule (a first call guesses so).
  static bool expected();
  // The spin, after a round of looks that found nothing ready and no news. `kernel`: what the call
  // sleeps on but the streams' sleeper (the caller's descriptors the kernel reports on, the
  // sessions' wake descriptors), looked at without sleeping every few polls; the spin ends by the
  // deadline at the latest.
  static End run(PolledStreams& polled, pollfd* kernel, size_t kernel_count, const transport::Deadline& deadline);
};

}  // namespace tcp2rdma::preload
