#include "readiness/epoll_report.h"

#include <atomic>

namespace tcp2rdma::preload::epoll_detail {

void EpollReport::start(epoll_event* events, int maxevents, LookAt look) noexcept {
  events_ = events;
  maxevents_ = maxevents;
  n_ = 0;
  // Passes of every thread's report are numbered from one counter, so that no two passes share a
  // number (an entry may be looked at by a pass of another thread in between).
  static std::atomic<uint64_t> passes{0};
  pass_ = passes.fetch_add(1, std::memory_order_relaxed) + 1;
  unfired_from_ = unfired_to_ = 0;
  look_ = look;
  reported_.clear();
  gone_.clear();
  unlooked_.clear();
}

void EpollReport::report_entry(Entry* e) {
  if (e->pass == pass_) return;  // reported in this pass already
  Look now = look_(*e);
  if (now.moved) {
    gone_.push_back(e);
    return;
  }
  if (now.events == 0) return;
  events_[n_++] = {now.events, e->data};
  reported_.push_back(e);
  e->pass = pass_;
  if (e->events & EPOLLONESHOT) e->disabled = true;
}

void EpollReport::report_unfired(const epoll_event& event) noexcept {
  if (full()) return;
  if (unfired_from_ == unfired_to_) unfired_from_ = n_;
  events_[n_++] = event;
  unfired_to_ = n_;
}

void EpollReport::translate_fired(int fired, int epfd, Expand expand) {
  fired_.assign(events_ + n_, events_ + n_ + fired);
  looks_.clear();
  for (const epoll_event& got : fired_) {
    if (expand(got.data.ptr, epfd, &looks_)) continue;
    // The application's own descriptor. One reported for its prefix already gets the kernel's
    // events added, not a second report.
    bool merged = false;
    for (int j = unfired_from_; j < unfired_to_ && !merged; ++j) {
      if (events_[j].data.u64 == got.data.u64) {
        events_[j].events |= got.events;
        merged = true;
      }
    }
    if (!merged) events_[n_++] = got;
  }
  for (Entry* e : looks_) {
    if (e->disabled) continue;
    if (full()) {
      unlooked_.push_back(e);
      continue;
    }
    report_entry(e);
  }
}

}  // namespace tcp2rdma::preload::epoll_detail
