// A channel's account of its data messages, for a failover (docs/protocol.md, "When the RDMA path
// fails"): which are posted and not completed yet, oldest first; the cursor before which every one
// is acknowledged (in the peer's memory, where it reads them even after a reset); and where the bounce
// mirror's copy of our bytes begins, since an acknowledged zero-copy message's bytes were the
// caller's, not the mirror's. RC completes sends in the order they were posted, so a send completion
// of a data message is always the oldest's. With the link's lock held, as the channel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tcp2rdma::transport {

class SentLedger {
 public:
  // The stream starts with our cursor at `origin` and at most `most_in_flight` sends outstanding.
  void start(uint64_t origin, size_t most_in_flight) {
    ring_.assign(most_in_flight, {});
    head_ = 0;
    in_flight_ = zero_copy_in_flight_ = 0;
    acked_ = retained_from_ = origin;
  }
  // A data message was posted, ending our stream at `end`.
  void posted(uint64_t end, bool zero_copy);
  // The completion of a data message (the oldest), `ok` when it succeeded: a success moves acked (a
  // zero-copy one retained_from too, its bytes being in the peer's ring and the caller's again).
  void completed(bool zero_copy, bool ok);
  int in_flight() const { return in_flight_; }
  int zero_copy_in_flight() const { return zero_copy_in_flight_; }
  uint64_t acked() const { return acked_; }
  uint64_t retained_from() const { return retained_from_; }

 private:
  struct Message {
    uint64_t end;  // our cursor after the message
    bool zero_copy;
  };
  std::vector<Message> ring_;  // the messages in flight, oldest at head_ (a circle)
  size_t head_ = 0;
  int in_flight_ = 0;
  int zero_copy_in_flight_ = 0;
  uint64_t acked_ = 0;
  uint64_t retained_from_ = 0;
};

}  // namespace tcp2rdma::transport
