#include "readiness/epoll_report.h"

namespace tcp2rdma::preload::epoll_detail {

void EpollReport::start(epoll_event* events, int maxevents, LookAt look) noexcept {
  events_ = events;
  maxevents_ = maxevents;
  n_ = 0;
  unfired_from_ = unfired_to_ = 0;
  look_ = look;
  reported_.clear();
  gone_.clear();
}

void EpollReport::report_entry(Entry* e) {
  Look now = look_(*e);
  if (now.moved) {
    gone_.push_back(e);
    return;
  }
  if (now.events == 0) return;
  events_[n_++] = {now.events, e->data};
  reported_.push_back(e);
  if (e->events & EPOLLONESHOT) e->disabled = true;
}

void EpollReport::report_level_triggered(const std::vector<Entry*>& mine) {
  for (Entry* e : mine) {
    if (full()) return;
    if (e->disabled || (e->events & EPOLLET)) continue;
    report_entry(e);
  }
}

void EpollReport::report_unfired(const epoll_event& event) noexcept {
  if (full()) return;
  if (unfired_from_ == unfired_to_) unfired_from_ = n_;
  events_[n_++] = event;
  unfired_to_ = n_;
}

void EpollReport::translate_fired(int fired, int epfd, FindLive live, IsOurs ours) {
  // The kernel's events are read from where ours are written: we write at most one per event read.
  const int end = n_ + fired;
  for (int i = n_; i < end; ++i) {
    epoll_event got = events_[i];
    Entry* e = live(got.data.ptr);
    if (e != nullptr && e->epfd != epfd) e = nullptr;  // reused for another set since it fired here
    if (e == nullptr && ours(got.data.ptr)) continue;  // a registration gone meanwhile (retired())
    if (e == nullptr) {
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
      continue;
    }
    bool already = false;
    for (Entry* r : reported_) already |= r == e;
    if (already || e->disabled) continue;
    report_entry(e);
  }
}

}  // namespace tcp2rdma::preload::epoll_detail
