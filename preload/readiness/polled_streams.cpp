#include "readiness/polled_streams.h"

namespace tcp2rdma::preload {

void PolledStreams::clear() {
  sleeper_.clear();
  polled_.clear();
  index_.clear();
  blind_ = false;
}

void PolledStreams::next_round() {
  sleeper_.take_news();
  for (Polled& p : polled_) p.looked = false;
}

void PolledStreams::next_round_for_looks() {
  sleeper_.take_news_for_looks();
  for (Polled& p : polled_) p.looked = false;
}

transport::Readiness PolledStreams::look(transport::RdmaStream* stream, bool want_writable, bool arm) {
  Polled& p = find_or_add(stream);
  if (!p.looked) {
    p.readiness = stream->readiness(want_writable, true, p.subscribed, arm);
    p.looked = true;
    p.for_writing = want_writable;
  } else if (want_writable && !p.for_writing) {
    if (!p.readiness.writable) stream->want_writable();
    p.for_writing = true;
  }
  return p.readiness;
}

PolledStreams::Polled& PolledStreams::find_or_add(transport::RdmaStream* stream) {
  if (polled_.size() <= kSearched) {
    for (Polled& p : polled_) {
      if (p.stream == stream) return p;
    }
  } else if (auto it = index_.find(stream); it != index_.end()) {
    return polled_[it->second];
  }
  // Subscribed before its first look (news from then on wakes the call).
  bool subscribed = sleeper_.add(*stream);
  blind_ |= !subscribed;
  polled_.push_back({stream, {}, false, false, subscribed});
  if (polled_.size() > kSearched) {
    if (index_.empty()) {
      for (size_t i = 0; i < polled_.size(); ++i) index_.emplace(polled_[i].stream, i);
    } else {
      index_.emplace(stream, polled_.size() - 1);
    }
  }
  return polled_.back();
}

}  // namespace tcp2rdma::preload
