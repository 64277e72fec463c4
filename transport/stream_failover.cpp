// When the RDMA path fails (docs/protocol.md, "When the RDMA path fails"): what the stream keeps so that
// the connection can go on over TCP at the exact byte offset, and how it leaves its path. The exchange
// on TCP itself is the preload layer's; its arithmetic is path_failover.h.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "own_calls.h"
#include "rdma_stream.h"

namespace tcp2rdma::transport {

void RdmaStream::note_send_completion(const ibv_wc& wc) {
  link_->on_send_completed();
  uint64_t kind = StreamLink::work_kind(wc.wr_id);
  if (kind == kWrCopy || kind == kWrZeroCopy) ledger_.completed(kind == kWrZeroCopy, wc.status == IBV_WC_SUCCESS);
}

void RdmaStream::keep_unacknowledged(const uint8_t* src, uint64_t src_cursor) {
  uint64_t sent = flow_->sent();
  // The later of the first byte not acknowledged and this write's first byte.
  uint64_t acked = ledger_.acked();
  uint64_t from = acked - src_cursor <= sent - src_cursor ? acked : src_cursor;
  for (uint64_t c = from; c != sent;) {
    Mirror mirror{};
    uint64_t n = mirror_run(c, sent, &mirror);  // the mirror wraps as the ring does
    std::memcpy(mirror.base + (c & (mirror.size - 1)), src + (c - src_cursor), n);
    c += n;
  }
}

SentCursors RdmaStream::sent_cursors() const {
  return {flow_->peer_consumed(), ledger_.retained_from(), flow_->sent()};
}

bool RdmaStream::path_failed() const {
  std::lock_guard lock(mu_);
  return path_failed_;
}

bool RdmaStream::peer_aborted() const {
  std::lock_guard lock(mu_);
  return peer_aborted_;
}

bool RdmaStream::peer_asked_again() const {
  std::lock_guard lock(mu_);
  return peer_asked_again_;
}

bool RdmaStream::failover_pending() const {
  std::lock_guard lock(mu_);
  return failover_due();
}

RdmaStream::PathEnd RdmaStream::stop_path() {
  OwnCalls own;  // own_calls.h
  std::unique_lock lock(mu_);
  if (!failed()) {
    // Stopped while it worked here: the peer found the path failed first (its record came on TCP).
    note_failure("the peer's side of the path failed", "its failover record came on TCP");
    path_failed_ = true;
  }
  if (!link_->stopped()) fail_and_stop(failed() ? failure_ : Status::kReset);
  drain_after_failure(lock);  // every completion queued: what arrived counts, what was flushed does not
  // A write under way in another thread (the failure woke it) must be out first: a zero-copy one
  // copies its unacknowledged bytes into the bounce mirror on its way out, and until then the mirror
  // holds older bytes there (seen: a resend of stale bytes when the reader's thread failed over while
  // the writer still waited for its completions). Writes stop at once on a failed stream.
  cv_.wait(lock, [&] { return !writer_busy_; });
  PathEnd end;
  end.sent = sent_cursors();
  end.received = {flow_->consumed(), flow_->produced(), flow_->ring_window()};
  end.write_shut = write_shut_;
  end.peer_closed = flow_->peer_closed();
  return end;
}

Status RdmaStream::leave_path(uint64_t peer_received, std::vector<uint8_t>* unread, std::vector<uint8_t>* resend,
                              FailoverError* why) {
  OwnCalls own;  // own_calls.h
  std::unique_lock lock(mu_);
  uint64_t n = 0;
  *why = bytes_to_resend(sent_cursors(), peer_received, &n);
  if (*why != FailoverError::kNone) return Status::kProtocolError;
  resend->resize(n);
  for (uint64_t done = 0; done < n;) {
    Mirror mirror{};
    uint64_t c = peer_received + done;
    uint64_t chunk = mirror_run(c, peer_received + n, &mirror);
    std::memcpy(resend->data() + done, mirror.base + (c & (mirror.size - 1)), chunk);
    done += chunk;
  }
  // The peer's bytes here, in order: what is left of the prefix, then the ring.
  unread->resize(prefix_left() + flow_->readable());
  iovec whole{unread->data(), unread->size()};
  size_t taken = copy_prefix(&whole, 1, true);
  whole = {unread->data() + taken, unread->size() - taken};
  copy_out(&whole, 1, 0, true);
  return Status::kOk;
}

void RdmaStream::finish_leaving() {
  OwnCalls own;  // own_calls.h
  std::lock_guard lock(mu_);
  left_path_ = true;
  move_sent_ = true;  // our bytes go on on TCP: writes, close and abort act as after a move
  cv_.notify_all();
  wake_pollers();
}

void RdmaStream::give_up_path(Status s, const char* why) {
  OwnCalls own;  // own_calls.h
  std::lock_guard lock(mu_);
  path_given_up_ = true;
  if (!link_->stopped()) fail_and_stop(s);
  failure_ = s;
  // The path's failure is what the log said first; why it could not fail over is added.
  size_t used = std::strlen(failure_detail_);
  if (used + 3 < sizeof failure_detail_) {
    snprintf(failure_detail_ + used, sizeof failure_detail_ - used, "%s%s", used > 0 ? "; " : "", why);
  }
  cv_.notify_all();
  kick();
  wake_pollers();
}

RdmaStream::PathCheck RdmaStream::check_path(bool probe) {
  OwnCalls own;  // own_calls.h
  std::lock_guard lock(mu_);
  PathCheck check;
  // After the peer's end it sends nothing more, and its close may destroy its queue pair any moment:
  // progress here would only send credit updates into it (rxe counts a retry error for each). Our
  // own sends, the application's, still find a dead path.
  if (!failed() && !flow_->peer_closed()) {
    // Connection events first (a device removal shows only there), then completions, as in wait().
    // An application's poller loses nothing: its readiness() judges the stream's state, not the fds.
    LinkProgress::take_cm_events(*link_, *this);
    progress();
    if (!failed()) look_idle();  // the watcher looks at an idle stream every keepalive interval
    if (probe && !failed()) keepalive_locked();
  }
  check.failover_due = failover_due();
  check.moving = move_sent_ || move_owed_ || flow_->peer_moved();
  // Ended both ways is not over: our end may not be acknowledged yet, and a failover still owes it.
  check.over = (failed() && !check.failover_due) || disconnected_;
  return check;
}

}  // namespace tcp2rdma::transport
