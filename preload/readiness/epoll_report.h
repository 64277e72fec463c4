// The translation at the heart of epoll_wait over upgraded descriptors (epoll_sets.h): given a set's
// registrations, what each one's stream has now and what the kernel reported for the readiness fds,
// which of the application's registrations to report, with which events and data. It takes no lock
// and makes no call: epoll_wait.cpp holds the lock around it, sleeps in the kernel, and moves back to
// TCP the connections it hands back as gone. Host tests: tests/preload/readiness/epoll_report_test.cpp.
#pragma once

#include <sys/epoll.h>

#include <cstdint>
#include <vector>

#include "readiness/epoll_entries.h"

namespace tcp2rdma::preload::epoll_detail {

// What an entry's stream has now: the application's events among those it registered (0: none), or
// that its connection went back to TCP, when the entry is to leave the readiness fd for the socket.
struct Look {
  uint32_t events = 0;
  bool moved = false;
};
using LookAt = Look (*)(const Entry& e);
// Whether an event's data is the address of one of our entries, registered or retired.
using IsOurs = bool (*)(const void* data);
// The registered entry at an event's data (in any set), or null: found without walking the entries,
// since a wait may bring back many events and a set may hold thousands of registrations.
using FindLive = Entry* (*)(const void* data);

// One pass of a wait, written into the application's array. Kept per thread and started afresh for
// each pass, so that an event loop's wakeups do not allocate.
class EpollReport {
 public:
  void start(epoll_event* events, int maxevents, LookAt look) noexcept;

  int count() const noexcept { return n_; }
  bool full() const noexcept { return n_ >= maxevents_; }
  // The entries reported in this pass (a level-triggered one is kept signalled: keep_signalled).
  const std::vector<Entry*>& reported() const noexcept { return reported_; }
  // The entries found gone back to TCP since the last call, for the caller to move; it also forgets them.
  std::vector<Entry*>& take_gone() noexcept { return gone_; }

  // The level-triggered entries of `mine` whose stream is ready, whether their readiness fd fired
  // or not: it only signals changes, and the application expects a still-ready socket again and
  // again. Edge-triggered ones wait for their fd to fire (a look now would take their event).
  void report_level_triggered(const std::vector<Entry*>& mine);
  // An event that has no readiness fd behind it (a prefix the kernel cannot see, epoll_sets.h).
  // The kernel may report the same registration's socket in this pass: its events are merged in.
  void report_unfired(const epoll_event& event) noexcept;
  // The `fired` events the kernel wrote at events[count()...]: one whose data is a registered entry
  // of set `epfd` becomes that registration's events and data, if its stream has any of them now (a
  // readiness fd also fires for changes the application did not ask about); one for an entry no
  // longer registered in that set (`ours`) is dropped; the application's own descriptors' pass as
  // they are.
  void translate_fired(int fired, int epfd, FindLive live, IsOurs ours);

 private:
  // e's events now: reported (and a one-shot registration disabled, as the kernel disarms it), or
  // e handed back as gone.
  void report_entry(Entry* e);

  epoll_event* events_ = nullptr;
  int maxevents_ = 0;
  int n_ = 0;
  int unfired_from_ = 0, unfired_to_ = 0;
  LookAt look_ = nullptr;
  std::vector<Entry*> reported_;
  std::vector<Entry*> gone_;
};

}  // namespace tcp2rdma::preload::epoll_detail
