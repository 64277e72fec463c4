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
  // Whether this call's looks should leave the links unarmed for a spin: the thread's last call found
  // a fixed rule (a first call guesses so).
  static bool expected();
  // The spin, after a round of looks that found nothing ready and no news; it ends at news for a
  // stream of the call, at a descriptor in `kernel` the kernel reports ready (what the call sleeps on
  // but the streams' sleeper: the caller's own descriptors, the sessions' wake descriptors, looked at
  // without sleeping every few polls), at the rule's time or at the deadline. The caller looks again
  // whatever ended it (and sleeps, arming the links, if nothing is ready).
  static void run(PolledStreams& polled, pollfd* kernel, size_t kernel_count, const transport::Deadline& deadline);
};

}  // namespace tcp2rdma::preload
