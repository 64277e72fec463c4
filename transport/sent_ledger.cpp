#include "sent_ledger.h"

namespace tcp2rdma::transport {

void SentLedger::posted(uint64_t end, bool zero_copy) {
  // At most most_in_flight sends are outstanding, so the circle never overflows.
  ring_[(head_ + in_flight_) % ring_.size()] = {end, zero_copy};
  ++in_flight_;
  if (zero_copy) ++zero_copy_in_flight_;
}

void SentLedger::completed(bool zero_copy, bool ok) {
  if (zero_copy) --zero_copy_in_flight_;
  if (in_flight_ == 0) return;
  Message done = ring_[head_];
  head_ = (head_ + 1) % ring_.size();
  --in_flight_;
  if (!ok) return;
  acked_ = done.end;
  if (done.zero_copy) retained_from_ = done.end;  // those bytes are in the peer's ring, not here
}

}  // namespace tcp2rdma::transport
