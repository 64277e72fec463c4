// Readiness. A descriptor whose connection is on TCP is the kernel's to report, so without an
// upgraded descriptor among them these calls go straight to libc. An upgraded one is ready when its
// stream is (stream_poll_events); while none is, the call sleeps in place of their sockets, next to
// every other descriptor, on what wakes it when a stream changes (its thread's news list and the
// links' descriptors: transport/stream_sleeper.h), and looks again when one fires.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <vector>

#include "deadline.h"
#include "back_to_tcp/move_back.h"
#include "back_to_tcp/read_relay.h"
#include "data/stream_calls.h"
#include "libc/interposed.h"
#include "rdma_stream.h"
#include "readiness/epoll_sets.h"
#include "readiness/poll_spin.h"
#include "readiness/polled_streams.h"
#include "readiness/stream_events.h"
#include "registry/fd_table.h"
#include "registry/upgrade_session.h"

using tcp2rdma::preload::real;
using tcp2rdma::preload::route_for_call;

namespace {

using tcp2rdma::preload::CallUse;
using tcp2rdma::preload::use_of;
using tcp2rdma::transport::Deadline;

// Also tells epoll of an epoll set polled here (epoll_sets.h, epoll_note_watched): its readiness must
// show to poll from then on.
bool any_upgraded(const pollfd* fds, nfds_t nfds) {
  for (nfds_t i = 0; i < nfds; ++i) {
    tcp2rdma::preload::epoll_note_watched(fds[i].fd);
    if (auto route = route_for_call(fds[i].fd, use_of(fds[i].events)); route.ours() || route.counted()) return true;
  }
  return false;
}

// poll with upgraded descriptors among fds, or ones whose upgrade is under way. timeout: nullptr
// waits for ever. A descriptor whose upgrade is still on TCP is polled on its socket, with the
// session's wake fd beside it: when the connection moves, everything is looked at afresh.
int poll_streams_once(pollfd* fds, nfds_t nfds, const timespec* timeout, const sigset_t* sigmask) {
  // Scratch kept per thread: a poll loop should not allocate on every call.
  static thread_local std::vector<pollfd> shadow;
  // The streams are held until poll returns (another thread may close a descriptor meanwhile), and
  // let go on every way out.
  static thread_local std::vector<tcp2rdma::preload::StreamRef> streams;
  static thread_local tcp2rdma::preload::PolledStreams polled;
  // The bells of relays' queues slept on (back_to_tcp/read_relay.h), held until the call returns.
  static thread_local std::vector<std::shared_ptr<const int>> bells;
  struct LetGo {
    ~LetGo() {
      polled.clear();  // first: its streams are held by `streams`
      streams.clear();
      bells.clear();
    }
  } let_go;
  auto deadline = Deadline::in_timespec(timeout);
  // A call spins once at most, before its first sleep (poll_spin.h).
  bool spun = timeout != nullptr && timeout->tv_sec == 0 && timeout->tv_nsec == 0;
  using tcp2rdma::preload::PollSpin;
  for (;;) {
    polled.clear();  // the descriptors are looked up again: their streams may have changed
    streams.resize(nfds);
    shadow.assign(fds, fds + nfds);
    for (nfds_t i = 0; i < nfds; ++i) {
      streams[i] = route_for_call(fds[i].fd, use_of(fds[i].events));
      if (auto* session = streams[i].session()) shadow.push_back({session->wake_fd(), POLLIN, 0});
    }
    // A session without a wake fd (no descriptor to be had) cannot wake us when its connection moves:
    // we sleep in short slices and look again.
    bool blind = std::any_of(shadow.begin() + static_cast<std::ptrdiff_t>(nfds), shadow.end(),
                             [](const pollfd& p) { return p.fd < 0; });
    const size_t sessions_end = shadow.size();  // what follows is the streams' (the sleeper's)
    bool moved = false;
    // Descriptors we answer for: a stream, or a socket back on TCP with a prefix (ready at once).
    auto ours = [&](nfds_t i) { return streams[i] != nullptr || streams[i].prefixed(); };
    // Descriptors of the caller's that only the kernel can report on.
    nfds_t kernel_fds = 0;
    for (nfds_t i = 0; i < nfds; ++i) kernel_fds += !ours(i) && fds[i].fd >= 0;
    for (;;) {
      int ready = 0;
      // Looks before a spin leave the links unarmed; those after it arm them for the sleep.
      const bool spin_next = !spun && PollSpin::expected();
      polled.next_round_for_looks();
      bells.clear();  // each round finds the bells it sleeps on anew
      for (nfds_t i = 0; i < nfds; ++i) {
        if (!ours(i)) continue;
        tcp2rdma::preload::TcpPrefix& prefix = streams[i].socket()->prefix;
        pollfd bell{-1, 0, 0};  // a relay's, when its queue is slept on (back_to_tcp/read_relay.h)
        if (streams[i].prefixed() && prefix.fed() && (fds[i].events & (POLLIN | POLLRDNORM))) {
          // A relay's queue (a child's reads through its parent): readable when bytes come.
          fds[i].revents = tcp2rdma::preload::relay_poll_input(prefix, fds[i].events, &bell, &bells);
          ready += fds[i].revents != 0;
          shadow[i] = bell;
          continue;
        }
        if (streams[i].prefixed()) {
          // Readable at once; asked for something else only, the socket itself is slept on.
          fds[i].revents = tcp2rdma::preload::prefixed_poll_events(fds[i].fd, fds[i].events);
          ready += fds[i].revents != 0;
          shadow[i] = {fds[i].revents != 0 ? -1 : fds[i].fd, fds[i].events, 0};
          continue;
        }
        tcp2rdma::transport::Readiness r =
            polled.look(streams[i], (fds[i].events & (POLLOUT | POLLWRNORM)) != 0, !spin_next);
        bool gone = r.moved;
        // A stream whose bytes a relay takes: input is its queue's, the rest the stream's.
        bool relayed = prefix.present();
        short in = relayed ? tcp2rdma::preload::relay_poll_input(prefix, fds[i].events, &bell, &bells) : 0;
        short asked = relayed ? static_cast<short>(fds[i].events & ~(POLLIN | POLLRDNORM)) : fds[i].events;
        fds[i].revents = static_cast<short>(tcp2rdma::preload::poll_events_of(r, asked) | in);
        if (gone) {
          // Back on TCP: the socket is polled from now on.
          tcp2rdma::preload::complete_move_back(streams[i].socket(), fds[i].fd);
          fds[i].revents = 0;
          moved = true;
        }
        ready += fds[i].revents != 0;
        // Not slept on itself: what wakes us for it is the sleeper's (appended below), and a relay's bell.
        shadow[i] = bell;
      }
      // A stream that could not be subscribed (no descriptor to be had) is looked at after a short sleep.
      blind |= polled.blind();
      shadow.resize(sessions_end);
      polled.append_pollfds(&shadow);
      // News the looks pushed themselves (a link's completions handed out by this thread) wrote no
      // eventfd: looked at now, where a sleep would have returned at once.
      if (polled.end_round() && ready == 0 && !moved) continue;
      if (moved && ready == 0) break;
      // Nothing but streams (and unused entries) asked about, one of them ready: the kernel has no
      // descriptor of the caller's to report, and a look at the sleeper's would only cost a call (a
      // poll loop's every call whose stream is ready at once, and its every look after a sleep).
      if (ready > 0 && kernel_fds == 0) return ready;
      if (spin_next && ready == 0 && !moved) {
        // Whatever ended the spin, the next round looks (and arms the links if it is to sleep).
        spun = true;
        if (!blind && bells.empty()) PollSpin::run(polled, shadow.data(), sessions_end, deadline);
        continue;
      }
      timespec left = ready == 0 ? deadline.left_timespec() : timespec{0, 0};
      bool forever = ready == 0 && deadline.never_ends() && !blind && bells.empty();
      constexpr timespec kSlice{0, tcp2rdma::preload::UpgradeSession::kBlindSleepMs * 1000000L};
      if (blind && ready == 0 && (deadline.never_ends() || left.tv_sec > 0 || left.tv_nsec > kSlice.tv_nsec)) {
        left = kSlice;
      } else if (!bells.empty() && ready == 0 && (deadline.never_ends() || left.tv_sec > 0)) {
        left = {1, 0};  // a relay's feeder is looked at each second (relay_poll_input)
      }
      int rc = real().ppoll(shadow.data(), shadow.size(), forever ? nullptr : &left, sigmask);
      if (rc < 0) return -1;
      if (rc > 0) polled.note_fired(shadow.data() + sessions_end);
      for (nfds_t i = 0; i < nfds; ++i) {
        if (ours(i)) continue;
        fds[i].revents = shadow[i].revents;
        ready += fds[i].revents != 0;
      }
      for (size_t i = nfds; i < sessions_end; ++i) moved |= shadow[i].revents != 0;
      if (ready > 0) return ready;
      if (deadline.passed() || (rc == 0 && !blind && bells.empty())) return 0;  // timed out
      if (moved || blind) break;
      // Only what stands for the streams fired: look at them again.
      for (nfds_t i = 0; i < nfds; ++i) shadow[i] = ours(i) ? shadow[i] : fds[i];
    }
  }
}

int poll_streams(pollfd* fds, nfds_t nfds, const timespec* timeout, const sigset_t* sigmask) {
  return tcp2rdma::preload::keeping_errno_on_success([&] { return poll_streams_once(fds, nfds, timeout, sigmask); });
}

timespec from_ms(int ms) { return {ms / 1000, static_cast<long>(ms % 1000) * 1000000}; }

int select_streams(int nfds, fd_set* rd, fd_set* wr, fd_set* ex, const timespec* timeout, const sigset_t* sigmask) {
  std::vector<pollfd> fds;
  for (int fd = 0; fd < nfds; ++fd) {
    short events = 0;
    if (rd != nullptr && FD_ISSET(fd, rd)) events |= POLLIN;
    if (wr != nullptr && FD_ISSET(fd, wr)) events |= POLLOUT;
    if (ex != nullptr && FD_ISSET(fd, ex)) events |= POLLPRI;
    if (events != 0) fds.push_back({fd, events, 0});
  }
  int rc = poll_streams(fds.data(), fds.size(), timeout, sigmask);
  if (rc < 0) return -1;
  int count = 0;
  for (const pollfd& p : fds) {
    if (p.revents & POLLNVAL) {
      errno = EBADF;
      return -1;
    }
    bool r = (p.events & POLLIN) && (p.revents & (POLLIN | POLLHUP | POLLERR));
    bool w = (p.events & POLLOUT) && (p.revents & (POLLOUT | POLLERR));
    bool e = (p.events & POLLPRI) && (p.revents & POLLPRI);
    if (rd != nullptr) r ? (void)++count : FD_CLR(p.fd, rd);
    if (wr != nullptr) w ? (void)++count : FD_CLR(p.fd, wr);
    if (ex != nullptr) e ? (void)++count : FD_CLR(p.fd, ex);
  }
  return count;
}

bool any_upgraded_in(int nfds, const fd_set* rd, const fd_set* wr, const fd_set* ex) {
  for (int fd = 0; fd < nfds; ++fd) {
    bool asked = (rd != nullptr && FD_ISSET(fd, rd)) || (wr != nullptr && FD_ISSET(fd, wr)) ||
                 (ex != nullptr && FD_ISSET(fd, ex));
    if (!asked) continue;
    tcp2rdma::preload::epoll_note_watched(fd);
    CallUse use = wr != nullptr && FD_ISSET(fd, wr) ? CallUse::kAny : CallUse::kRead;
    if (auto route = route_for_call(fd, use); route.ours() || route.counted()) return true;
  }
  return false;
}

}  // namespace

// glibc declares poll's array write-only (__attr_access), so GCC takes our reading of the events the
// caller filled in for reading uninitialized memory.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

T2R_INTERPOSE int poll(struct pollfd* fds, nfds_t nfds, int timeout) {
  if (any_upgraded(fds, nfds)) {
    timespec t = from_ms(timeout);
    return poll_streams(fds, nfds, timeout < 0 ? nullptr : &t, nullptr);
  }
  return real().poll(fds, nfds, timeout);
}

T2R_INTERPOSE int __poll_chk(struct pollfd* fds, nfds_t nfds, int timeout, size_t fdslen) {
  if (any_upgraded(fds, nfds) && nfds * sizeof *fds <= fdslen) {
    timespec t = from_ms(timeout);
    return poll_streams(fds, nfds, timeout < 0 ? nullptr : &t, nullptr);
  }
  return real().__poll_chk(fds, nfds, timeout, fdslen);
}

T2R_INTERPOSE int ppoll(struct pollfd* fds, nfds_t nfds, const struct timespec* timeout, const sigset_t* sigmask) {
  if (any_upgraded(fds, nfds)) return poll_streams(fds, nfds, timeout, sigmask);
  return real().ppoll(fds, nfds, timeout, sigmask);
}

T2R_INTERPOSE int __ppoll_chk(struct pollfd* fds, nfds_t nfds, const struct timespec* timeout,
                              const sigset_t* sigmask, size_t fdslen) {
  if (any_upgraded(fds, nfds) && nfds * sizeof *fds <= fdslen) return poll_streams(fds, nfds, timeout, sigmask);
  return real().__ppoll_chk(fds, nfds, timeout, sigmask, fdslen);
}

#pragma GCC diagnostic pop

T2R_INTERPOSE int select(int nfds, fd_set* rd, fd_set* wr, fd_set* ex, struct timeval* timeout) {
  if (any_upgraded_in(nfds, rd, wr, ex)) {
    timespec t{};
    if (timeout != nullptr) t = {timeout->tv_sec, timeout->tv_usec * 1000};
    return select_streams(nfds, rd, wr, ex, timeout != nullptr ? &t : nullptr, nullptr);
  }
  return real().select(nfds, rd, wr, ex, timeout);
}

T2R_INTERPOSE int pselect(int nfds, fd_set* rd, fd_set* wr, fd_set* ex, const struct timespec* timeout,
                          const sigset_t* sigmask) {
  if (any_upgraded_in(nfds, rd, wr, ex)) return select_streams(nfds, rd, wr, ex, timeout, sigmask);
  return real().pselect(nfds, rd, wr, ex, timeout, sigmask);
}
