// The translation at the heart of epoll_wait over upgraded descriptors (epoll_sets.h): given a set's
// registrations, what each one's stream has now and which of their records the kernel reported,
// which of the application's registrations to report, with which events and data. It takes no lock
// and makes no call of its own: epoll_wait.cpp holds the lock around it, sleeps in the kernel, says
// which entries a fired record stands for (its news), and moves back to TCP the connections it hands
// back as gone. Host tests: tests/preload/readiness/epoll_report_test.cpp.
#pragma once

#include <sys/epoll.h>

#include <cstdint>
#include <vector>

#include "readiness/epoll_entries.h"

namespace tcp2rdma::preload::epoll_detail {

// What an entry's stream has now: the application's events among those it registered (0: none), or
// that its connection went back to TCP, when the entry is to leave its record for the socket.
struct Look {
  uint32_t events = 0;
  bool moved = false;
};
using LookAt = Look (*)(const Entry& e);
// What a fired event stands for: false when its data is none of ours (the application's own
// descriptor); else the registrations of set epfd to look at are appended to *looks (a record's news:
// none when the record is retired, or registered in another set).
using Expand = bool (*)(const void* data, int epfd, std::vector<Entry*>* looks);

// One pass of a wait, written into the application's array. Kept per thread and started afresh for
// each pass, so that an event loop's wakeups do not allocate.
class EpollReport {
 public:
  void start(epoll_event* events, int maxevents, LookAt look) noexcept;

  int count() const noexcept { return n_; }
  bool full() const noexcept { return n_ >= maxevents_; }
  // The entries reported in this pass (the level-triggered ones are kept: keep_reported_locked).
  const std::vector<Entry*>& reported() const noexcept { return reported_; }
  // The entries found gone back to TCP since the last call, for the caller to move; it also forgets them.
  std::vector<Entry*>& take_gone() noexcept { return gone_; }
  bool any_gone() const noexcept { return !gone_.empty(); }
  // The entries with news that found no room in the application's array: the caller puts them back
  // on their records' lists, to be looked at on the next wait.
  const std::vector<Entry*>& unlooked() const noexcept { return unlooked_; }
  // An event that has no kernel event behind it (a prefix the kernel cannot see, epoll_sets.h).
  // The kernel may report the same registration's socket in this pass: its events are merged in.
  void report_unfired(const epoll_event& event) noexcept;
  // An entry a former pass reported (level-triggered: keep_reported_locked), reported again if its
  // stream still has the application's events, or handed back as gone.
  void report_carried(Entry* e) {
    if (full()) {
      unlooked_.push_back(e);
      return;
    }
    report_entry(e);
  }
  // The `fired` events the kernel wrote at events[count()...]. The application's own descriptors'
  // pass as they are, first: each takes the slot it came in, so none is ever dropped for want of
  // room (an edge-triggered one would be lost). Then each entry a record of ours stands for is
  // reported with the application's events and data, if its stream has any of them now (news also
  // comes for changes the application did not ask about), while there is room; the others are left
  // in unlooked().
  void translate_fired(int fired, int epfd, Expand expand);

 private:
  // e's events now: reported (and a one-shot registration disabled, as the kernel disarms it), or
  // e handed back as gone. Reported once a pass: an entry both carried and named by its record's news
  // is one registration (one looked at without events is looked at again: news may have come since).
  void report_entry(Entry* e);

  epoll_event* events_ = nullptr;
  int maxevents_ = 0;
  int n_ = 0;
  uint64_t pass_ = 0;  // this pass's number, stamped on the entries it looks at (Entry::pass)
  int unfired_from_ = 0, unfired_to_ = 0;
  LookAt look_ = nullptr;
  std::vector<Entry*> reported_;
  std::vector<Entry*> gone_;
  std::vector<Entry*> unlooked_;
  std::vector<epoll_event> fired_;  // the kernel's events, copied before ours are written over them
  std::vector<Entry*> looks_;
};

}  // namespace tcp2rdma::preload::epoll_detail
