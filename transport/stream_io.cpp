// The data path of an RdmaStream: write (inline, bounce buffer, zero-copy), read, shutdown, close,
// abort. Buffer ownership at each step is in docs/protocol.md ("Who owns which buffer").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

#include "byte_source.h"
#include "own_calls.h"
#include "rdma_stream.h"

namespace tcp2rdma::transport {
Status RdmaStream::write(const iovec* iov, int iovcnt, int flags, size_t* done, size_t* zero_copied) {
  OwnCalls own;  // own_calls.h
  *done = 0;
  std::unique_lock lock(mu_);
  const uint64_t zero_copied_before = counters_.zcopy_bytes;
  while (writer_busy_) {
    if (flags & kNonBlocking) return Status::kWouldBlock;
    cv_.wait(lock);
  }
  writer_busy_ = true;
  Status s = Status::kOk;
  // A piece large enough for a zero-copy write goes alone; the pieces between such ones go by copy
  // together, gathered into as few messages as the room allows (byte_source.h).
  auto zero_copy = [&](const iovec& piece) {
    return link_->registrations() != nullptr && zero_copy_part(piece.iov_len, options_) > 0;
  };
  for (int i = 0; i < iovcnt && s == Status::kOk;) {
    int end = i + 1;
    if (!zero_copy(iov[i])) {
      while (end < iovcnt && !zero_copy(iov[end])) ++end;
    }
    ByteSource run(iov + i, end - i);
    const size_t wanted = run.left();
    size_t taken = 0;
    s = write_piece(run, flags, &taken, lock);
    *done += taken;
    if (taken < wanted) break;
    i = end;
  }
  writer_busy_ = false;
  cv_.notify_all();
  if (zero_copied != nullptr) *zero_copied = counters_.zcopy_bytes - zero_copied_before;
  // Like the kernel: bytes taken are reported; an error after them comes with the next call.
  return *done > 0 ? Status::kOk : outward(s);
}

Status RdmaStream::write_piece(ByteSource& src, int flags, size_t* done, std::unique_lock<std::mutex>& lock) {
  const size_t len = src.left();
  if (move_sent_) return Status::kMovedToTcp;  // before any failure: the stream no longer matters
  if (write_shut_) return Status::kShutDown;
  if (failed()) return failure_;
  if (len == 0) return Status::kOk;
  if (wrote_after_peer_left_) {  // the peer's host has answered that write with its reset
    error_pending_ = false;
    return Status::kReset;
  }
  progress();  // the peer's end and leaving may be news
  // After the peer's end (rare): has it left too? Its disconnect shows only on the channels.
  if (flow_->peer_closed() && !disconnect_seen_) LinkProgress::take_events(*link_, *this);
  if (take_write_after_peer_left(len, done)) return Status::kOk;
  if (held_.bytes > 0 && zero_copy_part(len, options_) > 0) {
    held_.due = true;  // a zero-copy write goes alone, after the held message
    if (Status s = post_held(); s != Status::kOk && s != Status::kWouldBlock) return s;
  }
  if (size_t head = zero_copy_part(len, options_);
      link_->registrations() != nullptr && head > 0 && src.one_piece() && held_.bytes == 0) {
    Status s = write_zero_copy(src.here(), head, flags, done, lock);
    if (s == Status::kMemoryLock || s == Status::kResources) {
      // The buffer could not be registered (RLIMIT_MEMLOCK, say): the same bytes go by copy instead.
      ++counters_.zcopy_fallbacks;
    } else if (s != Status::kOk || *done < head) {
      return s;
    }
    src.skip(*done);
  }
  return write_copy(src, flags, done, lock);
}

bool RdmaStream::take_write_after_peer_left(size_t len, size_t* done) {
  // Its end and its release came first: every byte it sent is here, and its application closed.
  if (!disconnect_seen_ || wrote_after_peer_left_ || failed() || !flow_->peer_closed() || !peer_left()) return false;
  wrote_after_peer_left_ = true;
  error_pending_ = true;
  *done += len;
  return true;
}

int RdmaStream::take_error() {
  OwnCalls own;  // own_calls.h
  std::lock_guard lock(mu_);
  return std::exchange(error_pending_, false) ? EPIPE : 0;
}

Status RdmaStream::write_copy(ByteSource& src, int flags, size_t* done, std::unique_lock<std::mutex>& lock) {
  while (src.left() > 0) {
    if (Status s = progress(); s != Status::kOk) return s;
    if (move_sent_) return Status::kMovedToTcp;  // the rest goes on TCP, after our marker
    if (write_shut_) return Status::kShutDown;    // another thread shut our side down meanwhile
    if (disconnect_seen_) return Status::kReset;  // the peer has gone: nothing more can arrive there
    // The bytes go into the bounce mirror of the peer's ring, gathered from the caller's pieces: it
    // may have to send them again on TCP if the path fails (stream_failover.cpp), and this region is
    // free again once the peer has consumed them, which is after our write of them completed. They
    // join a message held back by an earlier write, or start one (stream_held.cpp).
    uint64_t taken = held_.bytes > 0 ? join_held(src) : 0;
    if (taken == 0 && held_.bytes > 0) {
      held_.due = true;  // it cannot grow (the ring's end, no room): it goes first
      if (Status s = post_held(); s == Status::kOk) continue;
      else if (s != Status::kWouldBlock) return s;
    } else if (taken == 0 && send_queue_has_room(1)) {
      taken = start_message(src);
      if (taken == 0) {
        ++counters_.credit_stalls;
        if (Status s = request_wakeup(); s != Status::kOk) return s;
        spill_when_stuck();  // the peer may be waiting to write too (stream_spill.cpp)
      }
    }
    if (taken == 0) {
      if (flags & kNonBlocking) {
        bool news = false;  // as in read(): the link's event must come when room comes back
        if (arm_if_relied_on(&news) != Status::kOk) fail(Status::kReset);
        if (news) continue;
        return *done > 0 ? Status::kOk : Status::kWouldBlock;
      }
      if (Status s = wait(lock, /*interruptible=*/true); s != Status::kOk) return s;
      continue;
    }
    counters_.bytes_sent += taken;
    *done += taken;
    // Held while the caller says more follows, up to a message of kHoldLimit; a message that would
    // not go now for want of send queue room goes at the channel's next serve(), its bytes taken.
    if (!(flags & kMore) || held_.bytes >= kHoldLimit) {
      held_.due = true;
      if (Status s = post_held(); s != Status::kOk && s != Status::kWouldBlock) return s;
    }
  }
  return Status::kOk;
}

Status RdmaStream::write_zero_copy(const uint8_t* src, size_t len, int flags, size_t* done,
                                   std::unique_lock<std::mutex>& lock) {
  ibv_mr* mr = nullptr;
  RegistrationCache* registrations = link_->registrations();
  if (Status s = registrations->acquire(src, len, &mr); s != Status::kOk) return s;
  const uint8_t* const first = src;
  const uint64_t first_cursor = flow_->sent();
  Status result = Status::kOk;
  size_t left = len;
  while (left > 0) {
    if (result = progress(); result != Status::kOk) break;
    if (move_sent_) {
      result = Status::kMovedToTcp;
      break;
    }
    if (write_shut_) {
      result = Status::kShutDown;
      break;
    }
    if (disconnect_seen_) {
      result = Status::kReset;
      break;
    }
    uint64_t room = std::min(flow_->data_room(left), kMaxMessage);
    if (room == 0 || !send_queue_has_room(1)) {
      if (room == 0) {
        ++counters_.credit_stalls;
        if (result = request_wakeup(); result != Status::kOk) break;
        spill_when_stuck();
      }
      if (flags & kNonBlocking) {
        bool news = false;
        if (arm_if_relied_on(&news) != Status::kOk) fail(Status::kReset);
        if (news) continue;
        break;
      }
      if (result = wait(lock, /*interruptible=*/true); result != Status::kOk) break;
      continue;
    }
    uint64_t offset = flow_->peer_ring_offset();
    result = post_write(src, static_cast<uint32_t>(room), mr->lkey, offset,
                        imm(MessageType::kData, static_cast<uint32_t>(room)), true, 0, kWrZeroCopy);
    if (result != Status::kOk) break;
    flow_->on_data_sent(room);
    counters_.bytes_sent += room;
    counters_.zcopy_bytes += room;
    src += room;
    left -= room;
    *done += room;
  }
  // The caller owns its buffer again when we return: wait until the adapter has read all of it. That
  // takes acknowledgements only, never the peer application's reading. A stream that fails meanwhile
  // by its peer's word waits for them still (wait_out_sends); one whose path failed, or whose sends
  // never complete, stops its queue pair first: the adapter must not read the caller's buffer after
  // we return, nor send it anywhere.
  while (ledger_.zero_copy_in_flight() > 0 && !failed()) {
    if (Status s = progress(); s != Status::kOk || ledger_.zero_copy_in_flight() == 0) break;
    wait(lock);
  }
  if (ledger_.zero_copy_in_flight() > 0 && !path_failed_) wait_out_sends(lock);
  if (ledger_.zero_copy_in_flight() > 0) {
    fail_and_stop(failed() ? failure_ : Status::kReset);
    drain_after_failure(lock);
  }
  // Bytes taken but not acknowledged may have to go again on TCP (the path's failure): the caller's
  // buffer is its own after we return, so they are copied into the bounce mirror now.
  if (failed()) keep_unacknowledged(first, first_cursor);
  registrations->release(mr);
  if (result == Status::kOk && *done == 0 && len > 0) return Status::kWouldBlock;
  return result;
}

size_t RdmaStream::copy_out(const iovec* iov, int iovcnt, size_t skip, bool consume) {
  // Reads from the ring at our consumed cursor; a peek reads the same bytes without moving it.
  uint64_t available = flow_->readable();
  uint64_t cursor = 0;  // bytes copied so far in this call
  for (int i = 0; i < iovcnt && cursor < available; ++i) {
    size_t len = iov[i].iov_len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    auto* dst = static_cast<uint8_t*>(iov[i].iov_base) + skip;
    uint64_t want = std::min<uint64_t>(len - skip, available - cursor);
    skip = 0;
    while (want > 0) {
      // Contiguous in one ring: to its end (it wraps), and never across the peer's move to another.
      RingSpan span = flow_->span_at(flow_->consumed() + (consume ? 0 : cursor));
      uint64_t chunk = std::min<uint64_t>(want, span.length);
      std::memcpy(dst, ring_memory(span.gen) + span.offset, chunk);
      if (consume) {
        flow_->on_app_consumed(chunk);
        counters_.bytes_received += chunk;
      }
      dst += chunk;
      want -= chunk;
      cursor += chunk;
    }
  }
  return cursor;
}

size_t RdmaStream::copy_prefix(const iovec* iov, int iovcnt, bool consume) {
  size_t copied = 0;
  for (int i = 0; i < iovcnt && copied < prefix_left(); ++i) {
    size_t n = std::min(iov[i].iov_len, prefix_left() - copied);
    std::memcpy(iov[i].iov_base, prefix_.data() + prefix_pos_ + copied, n);
    copied += n;
  }
  if (consume) {
    prefix_pos_ += copied;
    counters_.bytes_received += copied;
    if (prefix_left() == 0) std::vector<uint8_t>().swap(prefix_);
    if (prefix_.empty()) prefix_pos_ = 0;
  }
  return copied;
}

void RdmaStream::set_unread_prefix(std::vector<uint8_t> bytes) {
  OwnCalls own;  // own_calls.h
  {
    std::lock_guard lock(mu_);
    // Ahead of what the prefix still holds: those are the peer's bytes on the stream (the first
    // bytes its open carried), which follow its TCP tail.
    bytes.insert(bytes.end(), prefix_.begin() + static_cast<std::ptrdiff_t>(prefix_pos_), prefix_.end());
    prefix_ = std::move(bytes);
    prefix_pos_ = 0;
  }
  if (!prefix_.empty()) wake_pollers();
}

Status RdmaStream::read(const iovec* iov, int iovcnt, int flags, size_t* done) {
  OwnCalls own;  // own_calls.h
  *done = 0;
  size_t want = 0;
  for (int i = 0; i < iovcnt; ++i) want += iov[i].iov_len;
  std::unique_lock lock(mu_);
  while (reader_busy_) {
    if (flags & kNonBlocking) return Status::kWouldBlock;
    cv_.wait(lock);
  }
  reader_busy_ = true;
  bool consume = !(flags & kPeek);
  bool wait_all = (flags & kWaitAll) && consume;
  Status s = Status::kOk;
  // The prefix comes first; a read returns what it holds (at most), and only MSG_WAITALL goes on into
  // the ring for the rest.
  if (prefix_left() > 0) {
    size_t from_prefix = copy_prefix(iov, iovcnt, consume);
    *done = from_prefix;
    if (from_prefix == want || !wait_all) {
      reader_busy_ = false;
      cv_.notify_all();
      return Status::kOk;
    }
  }
  for (;;) {
    progress();  // a failure is reported below, after the bytes that came before it
    if (flow_->readable() > 0 && *done < want) {
      *done += copy_out(iov, iovcnt, *done, consume);
      if (consume && !failed() && !disconnect_seen_) send_credits();
      if (!wait_all || *done == want) break;
      continue;
    }
    if (flow_->peer_moved() && !flow_->peer_closed()) {
      // Every byte the peer sent on the stream is read: the rest is on TCP (before any failure of
      // the stream, which no longer matters).
      s = *done > 0 ? Status::kOk : Status::kMovedToTcp;
      break;
    }
    if (left_path_) {  // the failover took the rest: it is on TCP now, after the socket's prefix
      s = *done > 0 ? Status::kOk : Status::kMovedToTcp;
      break;
    }
    if (failed()) {
      s = *done > 0 ? Status::kOk : failure_;
      break;
    }
    // The end of the stream (after any bytes read): the peer's, or our own shutdown(SHUT_RD).
    if (flow_->peer_closed() || read_shut_ || want == 0) break;
    if (flags & kNonBlocking) {
      if (*done == 0 && !failed()) {
        // A peer that disconnected without an end shows only in the link's connection events: taken
        // here (a system call) unless a poller watches them for us (readiness() was called).
        if (!polled_) LinkProgress::take_events(*link_, *this);
        progress();
        if (failed() || flow_->readable() > 0 || peer_done()) continue;
        // Would block: the next change must raise the link's event for a poller that sleeps on it
        // without arming it itself (arm_if_relied_on); an event loop's wait arms it before it sleeps.
        bool news = false;
        if (arm_if_relied_on(&news) != Status::kOk) fail(Status::kReset);
        if (news || failed()) continue;
      }
      s = *done > 0 ? Status::kOk : Status::kWouldBlock;
      break;
    }
    if (wait(lock, /*interruptible=*/true) == Status::kInterrupted) {
      s = *done > 0 ? Status::kOk : Status::kInterrupted;  // MSG_WAITALL returns what it has, as TCP's
      break;
    }
  }
  reader_busy_ = false;
  cv_.notify_all();
  return outward(s);
}

void RdmaStream::shutdown_read() {
  OwnCalls own;  // own_calls.h
  std::lock_guard lock(mu_);
  read_shut_ = true;
  cv_.notify_all();  // a reader asleep meanwhile returns the end, as from the kernel's shutdown
}

Status RdmaStream::shutdown_write() {
  OwnCalls own;  // own_calls.h
  std::unique_lock lock(mu_);
  // A writer blocked on credits meanwhile stops at the close (write_shut_), as a send blocked in the
  // kernel returns when another thread shuts the socket down: its bytes posted so far come first.
  if (move_sent_) return Status::kMovedToTcp;  // our end now goes on TCP
  if (write_shut_) return Status::kOk;
  Status s = progress();
  if (flow_->peer_closed() && peer_left() && (disconnect_seen_ || disconnected_)) {
    // The peer ended its side in order and is gone: kernel TCP's shutdown() succeeds there (its FIN
    // goes to a closed peer); nobody is left to read an end of ours.
    write_shut_ = true;
    return Status::kOk;
  }
  if (s != Status::kOk) return outward(s);
  if (disconnect_seen_) return outward(Status::kReset);
  // Like the kernel's FIN, the close is queued, never waited for: it goes now if the peer left us a
  // receive, else at the next progress once its credit update comes (a peer that never sends one
  // cannot make this call block). Writes fail from here.
  write_shut_ = true;
  close_owed_ = true;
  send_owed_close();
  kick();  // a writer asleep on credits stops now
  // Writable from here (writes fail at once), as a socket after shutdown(SHUT_WR): its pollers are
  // told, as the kernel wakes a socket's on a change of its state.
  if (polled_) wake_pollers();
  return failed() ? outward(failure_) : Status::kOk;
}

Status RdmaStream::flush() {
  OwnCalls own;  // own_calls.h
  std::unique_lock lock(mu_);
  return flush_locked(lock, Deadline::in_ms(options_.timeout_ms));
}

Status RdmaStream::flush_locked(std::unique_lock<std::mutex>& lock, Deadline deadline) {
  // A write is in the peer's memory once its send is acknowledged; the peer delivers what is there
  // even if a reset follows. An owed close must first go out (it waits for the peer's credit).
  // Our channel's sends, not the link's: other channels' traffic must not hold our close.
  if (held_.bytes > 0) held_.due = true;  // it goes at the progress below, or when room comes back
  while ((link_->sends_of(index_) > 0 || close_owed_ || held_.bytes > 0) && !failed() && !disconnect_seen_) {
    if (deadline.passed()) return Status::kTimeout;
    progress();
    if (link_->sends_of(index_) > 0 && !close_owed_) signal_tail();
    if (link_->sends_of(index_) > 0 || close_owed_ || held_.bytes > 0) wait(lock, false, deadline.poll_ms());
  }
  return failed() ? outward(failure_) : Status::kOk;
}

Status RdmaStream::close() {
  return close(Deadline::in_ms(options_.timeout_ms));
}

Status RdmaStream::close(Deadline deadline) {
  OwnCalls own;  // own_calls.h
  // Our bytes, then our end (queued: shutdown_write never waits), must be in the peer's memory before
  // the connection goes; once they are, a disconnect reads as the end. After a move back to TCP the
  // stream carried our marker last, and TCP's close is the kernel's. What the peer still sends us
  // after this is dropped, as TCP drops it.
  Status s = writes_moved() ? Status::kOk : shutdown_write();
  std::unique_lock lock(mu_);
  if (s == Status::kOk) {
    // Our release says our application is gone (a disconnect without it is the path failing, for a
    // peer whose application may still read: links.md, "Ending a channel"). It goes behind our end,
    // with it or at once after it, and the flush waits for both; a close that had to wait for the
    // peer's credit sends its release once it went.
    send_close_with_release();
    if (!close_owed_) send_release();
    s = flush_locked(lock, deadline);
    if (s == Status::kOk && flow_ && !flow_->release_sent() && !disconnect_seen_) {
      send_release();
      s = flush_locked(lock, deadline);
    }
  }
  end_on_link();
  return move_sent_ ? Status::kOk : s;
}

void RdmaStream::abort() { abort_with(kEndAbort); }

void RdmaStream::abort_asking_again() { abort_with(kEndAskAgain); }

void RdmaStream::abort_with(uint32_t end) {
  OwnCalls own;  // own_calls.h
  std::unique_lock lock(mu_);
  if (move_sent_) {
    // After our "to TCP" the peer may still be reading what came before it: no abort message, which
    // would overtake nothing but could fail the peer's stream; TCP carries the connection's fate.
    end_on_link();
    return;
  }
  held_ = {};  // a reset drops what was not sent, as the kernel's drops its send queue
  if (!failed() && !disconnected_ && !disconnect_seen_) {
    progress();
    // Best effort: if the abort message cannot go (or is flushed by the disconnect), the peer sees a
    // disconnect without an orderly end, which it reads as a reset all the same. The progress may
    // have taken the peer's release, answered at once by ours: nothing may follow a release (the
    // peer frees the channel's index on it, and a later message names a channel it no longer has).
    if (!failed() && !disconnect_seen_ && !flow_->release_sent() && flow_->credits() >= 1 &&
        send_queue_has_room(1)) {
      post_write(nullptr, 0, 0, 0, imm(MessageType::kEnd, end), true, 0, kWrSignal);
    }
  }
  fail(Status::kReset);
  end_on_link();
}

void RdmaStream::end_on_link() {
  // Nothing more goes out on this channel. On a link that others hold (channels, opens under way)
  // the peer learns it from our release; a link that ends with this channel is disconnected, which
  // the peer reads the same way.
  if (!disconnected_ && link_.use_count() > 1 && !link_->stopped()) send_release();
  if (link_.use_count() == 1) link_->disconnect();
  disconnected_ = true;
}

void RdmaStream::send_close_with_release() {
  // Our close still waits for a receive of the peer's: its module gives receives back at its own
  // progress, which may not come before our deadline (its application busy elsewhere, its path
  // watcher's look seconds away), and a release after that deadline without the close read as a
  // reset. A closed stream owes the peer nothing after its end but the release, whose receive the
  // peer always keeps: the two go as one message on it, as the kernel's FIN goes whatever the peer's
  // application does. Not with a held message still unsent (its bytes come before the end, and need
  // credit of their own).
  if (!close_owed_ || held_.bytes > 0 || failed() || disconnect_seen_ || disconnected_ || !flow_ ||
      !flow_->may_send_close_release() || link_->stopped() || !send_queue_has_room(1)) {
    return;
  }
  if (post_write(nullptr, 0, 0, 0, imm(MessageType::kEnd, kEndCloseRelease), true, 0, kWrSignal) != Status::kOk) return;
  flow_->on_close_release_sent();
  close_owed_ = false;
  release_owed_ = false;
  cv_.notify_all();
}

void RdmaStream::send_release() {
  if (!flow_ || flow_->release_sent() || link_->stopped() || !send_queue_has_room(1)) return;
  // Its receive at the peer is the one each channel keeps for it: no credit needed.
  if (post_write(nullptr, 0, 0, 0, imm(MessageType::kEnd, kEndRelease), true, 0, kWrSignal) == Status::kOk) {
    flow_->on_release_sent();
    release_owed_ = false;
  }
}

}  // namespace tcp2rdma::transport

namespace tcp2rdma::transport {

void RdmaStream::start_move_to_tcp(bool returning) {
  OwnCalls own;  // own_calls.h
  std::lock_guard lock(mu_);
  if (move_sent_ || failed()) return;
  move_owed_ = true;
  move_returns_ = move_returns_ || returning;
  progress();
}

bool RdmaStream::peer_returns_at_once() const {
  std::lock_guard lock(mu_);
  return peer_returns_;
}

Status RdmaStream::move_to_tcp(std::vector<uint8_t>* unread, bool* peer_ended) {
  OwnCalls own;  // own_calls.h
  unread->clear();
  *peer_ended = false;
  start_move_to_tcp();
  std::unique_lock lock(mu_);
  auto deadline = Deadline::in_ms(options_.timeout_ms);
  // A few round trips: our marker goes out at the next progress (credits permitting), and the peer's
  // stack answers with its own at its next progress, whatever its application is doing.
  for (;;) {
    Status s = progress();
    if (move_sent_ && flow_->peer_moved()) break;
    if (s != Status::kOk) return s;
    if (disconnect_seen_) return Status::kReset;
    if (deadline.passed()) return Status::kTimeout;
    if (Status w = wait(lock, false, deadline.poll_ms()); w != Status::kOk && !(move_sent_ && flow_->peer_moved())) return w;
  }
  // Everything the peer sent before its marker, in order: what is left of the prefix, then the ring.
  unread->resize(prefix_left() + flow_->readable());
  iovec whole{unread->data(), unread->size()};
  size_t taken = copy_prefix(&whole, 1, true);
  whole = {unread->data() + taken, unread->size() - taken};
  copy_out(&whole, 1, 0, true);
  *peer_ended = flow_->peer_closed();
  cv_.notify_all();  // a reader of another thread finds the stream moved
  if (polled_) wake_pollers();
  return Status::kOk;
}

std::string RdmaStream::flow_summary() const {
  std::lock_guard lock(mu_);
  if (!flow_) return "no flow control yet";
  char text[200];
  snprintf(text, sizeof text,
           "of the peer's bytes %llu arrived, %llu read; of ours %llu sent, %llu consumed by the peer; %d sends "
           "of the link not completed",
           static_cast<unsigned long long>(flow_->produced() - flow_->peer_first_byte()),
           static_cast<unsigned long long>(flow_->consumed() - flow_->peer_first_byte()),
           static_cast<unsigned long long>(flow_->sent() - flow_->our_first_byte()),
           static_cast<unsigned long long>(flow_->peer_consumed() - flow_->our_first_byte()), link_->sends_outstanding());
  return text;
}

}  // namespace tcp2rdma::transport
