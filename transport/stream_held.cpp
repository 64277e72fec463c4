// A data message held back while the application says more follows (MSG_MORE, TCP_CORK): its bytes
// are in the bounce mirror and counted as sent, its credit taken, and the next writes' bytes join it,
// so that a reply written in pieces under a cork (nginx's header by writev, its file by sendfile)
// goes as one RDMA Write, one doorbell and one completion at the reader, as the kernel sends one
// segment (docs/protocol.md, "Holding a message back").
//
// Why its credit is taken at once: the held message must be able to go whenever it is pushed (an
// uncork, an end, a ring's adoption, a timer), and a credit left for later could be spent meanwhile
// by the arms and wakeups that keep two credits back for themselves. Why it is counted as sent: a
// failover resends every byte past the peer's acknowledged cursor from the mirror, the held ones
// included, which the application was told were written.
#include <algorithm>

#include "byte_source.h"
#include "own_calls.h"
#include "rdma_stream.h"

namespace tcp2rdma::transport {

uint64_t RdmaStream::start_message(ByteSource& src) {
  uint64_t room = std::min(flow_->data_room(src.left()), kMaxMessage);
  if (room == 0) return 0;
  uint64_t offset = flow_->peer_ring_offset();
  src.copy_to(current_mirror().base + offset, room);
  flow_->on_data_sent(room);
  held_ = {offset, room, false, 0};
  return room;
}

uint64_t RdmaStream::join_held(ByteSource& src) {
  // Only right after the held bytes in the same ring: a message is one contiguous RDMA Write.
  if (flow_->peer_ring_offset() != held_.offset + held_.bytes) return 0;  // the ring wrapped
  uint64_t room = std::min(flow_->append_room(src.left()), kMaxMessage - held_.bytes);
  if (room == 0) return 0;
  src.copy_to(current_mirror().base + held_.offset + held_.bytes, room);
  flow_->on_data_appended(room);
  held_.bytes += room;
  return room;
}

bool RdmaStream::takes_bytes() const {
  if (flow_->data_room(1) > 0) return true;
  return held_.bytes > 0 && held_.bytes < kMaxMessage && flow_->peer_ring_offset() == held_.offset + held_.bytes &&
         flow_->append_room(1) > 0;
}

Status RdmaStream::post_held() {
  if (held_.bytes == 0) return Status::kOk;
  // A stream that failed or lost its peer posts nothing more; the held bytes, counted as sent, are
  // resent on TCP by a failover like any unacknowledged ones.
  if (failed()) return failure_;
  if (disconnect_seen_ || disconnected_) return Status::kReset;
  if (!send_queue_has_room(1)) return Status::kWouldBlock;  // served again when room comes back
  Mirror mirror = current_mirror();
  const uint32_t length = static_cast<uint32_t>(held_.bytes);
  uint32_t data_imm = imm(MessageType::kData, length);
  Status s;
  if (length <= link_->max_inline() && length <= options_.inline_threshold) {
    // Small: the adapter copies it into the work request now.
    s = post_write(mirror.base + held_.offset, length, 0, held_.offset, data_imm, true, IBV_SEND_INLINE, kWrCopy);
    ++counters_.inline_messages;
  } else {
    s = post_write(mirror.base + held_.offset, length, mirror.mr->lkey, held_.offset, data_imm, true, 0, kWrCopy);
  }
  if (s == Status::kOk) held_ = {};
  return s;
}

void RdmaStream::push() {
  OwnCalls own;  // own_calls.h
  std::lock_guard lock(mu_);
  if (held_.bytes == 0) return;
  held_.due = true;
  post_held();
}

bool RdmaStream::holds_message() const {
  std::lock_guard lock(mu_);
  return held_.bytes > 0;
}

bool RdmaStream::push_if_aged() {
  OwnCalls own;  // own_calls.h
  std::lock_guard lock(mu_);
  if (held_.bytes == 0) return false;
  if (++held_.ticks >= 2) {
    held_.due = true;
    post_held();
  }
  return held_.bytes > 0;
}

}  // namespace tcp2rdma::transport
