// Spilling the ring: what keeps two applications that each write before they read from waiting for
// each other for good.
//
// Kernel TCP takes a few MiB of a connection's bytes that nobody reads (the sender's and the
// receiver's buffers), so an application may write a whole message before it reads its peer's, and
// a peer may answer while it writes (an echo server under asyncio stops reading while its answer
// drains). Over RDMA the peer's bytes wait in our ring, which is pinned and as small as the pinning
// budget made it: once both rings are full and both applications wait to write, neither reads. So
// when our writer waits for room and our ring is full of unread bytes, those bytes move into ordinary
// memory behind the prefix, where read() serves them in order, and the peer gets the room. Only
// then: while the application reads, its reading makes the room, and a copy more would only cost.
//
// Not unbounded (spill_limit, 4 MiB by default): past it a stream waits as kernel TCP does once its
// buffers are full. A larger ring on its way is waited for instead (it makes room without a copy)
// until the peer answers: an adopted one that fills is spilled as the old one (oldest bytes first);
// a reader in a call of ours is left its bytes (it is about to take them, and must take them in
// order: it may be between the prefix and the ring).
#include <algorithm>
#include <cstring>

#include "rdma_stream.h"

namespace tcp2rdma::transport {

void RdmaStream::spill_when_stuck() {
  if (!flow_ || failed() || failover_due() || reader_busy_ || peer_done() || options_.spill_limit == 0) return;
  // A larger ring on its way makes the room; one the peer adopted already is the ring that is full,
  // and its old ring empties only as bytes are consumed, which the spill does.
  if (flow_->ring_offer_unanswered()) return;
  uint64_t unread = flow_->readable();
  // Full: the peer cannot write a byte more (it blocks only then: receives are reposted as they
  // arrive, and ring space we consumed is advertised at once to a peer that armed). Not merely armed
  // or partly read: an application reading from another thread keeps the ring moving, and a spill
  // would only copy its bytes twice.
  if (unread == 0 || !flow_->ring_full()) return;
  size_t held = prefix_left();
  if (held >= options_.spill_limit) return;
  uint64_t n = std::min<uint64_t>(unread, options_.spill_limit - held);
  // What was read of the prefix goes first once it is half of it (each byte moves once on average).
  if (prefix_pos_ > 0 && prefix_pos_ * 2 >= prefix_.size()) {
    prefix_.erase(prefix_.begin(), prefix_.begin() + static_cast<std::ptrdiff_t>(prefix_pos_));
    prefix_pos_ = 0;
  }
  size_t at = prefix_.size();
  prefix_.resize(at + n);
  for (uint64_t left = n; left > 0;) {
    // Contiguous in one ring: to its end (it wraps), never across the peer's move to another.
    RingSpan span = flow_->span_at(flow_->consumed());
    uint64_t chunk = std::min(left, span.length);
    std::memcpy(prefix_.data() + at, ring_memory(span.gen) + span.offset, chunk);
    flow_->on_app_consumed(chunk);  // counted as received when the application reads it
    at += chunk;
    left -= chunk;
  }
  counters_.bytes_spilled += n;
  if (Status s = send_credits(); s != Status::kOk) fail(s);
}

}  // namespace tcp2rdma::transport
