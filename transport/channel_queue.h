#pragma once
// The channels of a link that have something due (news for LinkProgress::serve_touched, room in the send queue for
// a channel that found none), by index, each at most once. Whoever serves them walks these rather
// than every channel of the link: a link carries thousands of channels, and a completion concerns one.

#include <cstdint>
#include <vector>

namespace tcp2rdma::transport {

class ChannelQueue {
 public:
  void add(uint32_t index) {
    if (index >= queued_.size()) queued_.resize(index + 1, false);
    if (queued_[index]) return;
    queued_[index] = true;
    list_.push_back(index);
  }
  bool empty() const { return list_.empty(); }
  // Hands the queued indices to `out` (its old content dropped) and forgets them: what serving them
  // queues again is the next taker's. An index may name a channel that went, or another channel that
  // took the index since: the taker checks the channel's own flag.
  void take(std::vector<uint32_t>& out) {
    out.clear();
    out.swap(list_);
    for (uint32_t i : out) queued_[i] = false;
  }

 private:
  std::vector<bool> queued_;
  std::vector<uint32_t> list_;
};

}  // namespace tcp2rdma::transport
