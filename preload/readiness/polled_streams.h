// The streams of one poll call (interpose/poll.cpp), each looked at once a round and subscribed to the
// calling thread's sleeper for the call (stream_sleeper.h). Once, because a descriptor may be in several entries
// (OpenBSD nc polls its connection for POLLOUT in one entry and POLLIN in another): a second look in
// the same round takes the news it finds (room came back, say) for its own entry, which asked about
// bytes, and the call would sleep beside a writable stream until some later completion
// (integration.fault_wire.pair with 64 KiB rings: bursts every 20 s; integration.poll_duplicates.loop).
// Subscribed, because another thread's look at the same stream may take the link's event this call
// sleeps on: the news it hands out wakes the call through its sleeper's own list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "rdma_stream.h"
#include "stream_sleeper.h"

namespace tcp2rdma::preload {

class PolledStreams {
 public:
  PolledStreams() = default;
  PolledStreams(const PolledStreams&) = delete;
  PolledStreams& operator=(const PolledStreams&) = delete;
  ~PolledStreams() { clear(); }

  // Lets every stream go (before the descriptors are looked up again, or the call returns): the
  // caller holds the streams until then.
  void clear();
  // Before each round of looks (the sleeper's news taken first: stream_sleeper.h).
  void next_round();
  // A round whose caller ends it with end_round() before it sleeps (stream_sleeper.h,
  // take_news_for_looks): true when news came during the looks, to look again instead.
  void next_round_for_looks();
  bool end_round() { return sleeper_.end_looks(); }
  // The stream's readiness in this round: looked at on its first entry, the same for the others.
  // `want_writable`: this entry asks for POLLOUT (only then is the peer asked to say when room comes
  // back: RdmaStream::readiness).
  // `arm`: false when a spin comes next (poll_spin.h): the link is armed in a look after it.
  transport::Readiness look(transport::RdmaStream* stream, bool want_writable, bool arm = true);
  // A spin before the sleep (StreamSleeper's, poll_spin.h).
  void begin_spin() { sleeper_.begin_spin(); }
  void spin() { sleeper_.spin(); }
  bool news() { return sleeper_.news(); }
  void end_spin() { sleeper_.end_spin(); }
  int spin_rule(bool* adaptive, bool* yields) const { return sleeper_.spin_rule(adaptive, yields); }
  // What the call sleeps on between rounds, appended to *out.
  void append_pollfds(std::vector<pollfd>* out) const { sleeper_.append_pollfds(out); }
  // After every sleep, with what append_pollfds appended (the kernel's revents in it): the next
  // round's looks take the events of the link descriptors that fired, and only those. A caller that
  // sleeps on them and does not say so leaves a fired event untaken, and its next sleep returns at
  // once, again and again.
  void note_fired(const pollfd* slept) const { sleeper_.note_fired(slept); }
  // A stream could not be subscribed (no descriptor or memory): the call sleeps in short slices.
  bool blind() const { return blind_; }

 private:
  struct Polled {
    transport::RdmaStream* stream;
    transport::Readiness readiness;
    bool looked;
    bool for_writing;  // the look asked for room (or a later entry of the round did)
    bool subscribed;   // its link's descriptors are slept on: a look takes only what fired there
  };
  // A few streams are searched in place; a large poll set gets an index.
  static constexpr size_t kSearched = 8;

  Polled& find_or_add(transport::RdmaStream* stream);

  std::vector<Polled> polled_;
  transport::StreamSleeper sleeper_;
  bool blind_ = false;
  std::unordered_map<transport::RdmaStream*, size_t> index_;
};

}  // namespace tcp2rdma::preload
