// Progress of an RdmaStream: what it does with the completions and connection events the link hands
// it (link_progress.h), the mailbox, credit updates and wakeups, and what its blocked calls do around
// a wait for the link's news (link_wait.cpp). Everything here runs with mu_ held.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "os_calls.h"
#include "own_calls.h"
#include "rdma_stream.h"

namespace tcp2rdma::transport {
void RdmaStream::fail(Status s) {
  if (failure_ == Status::kOk) {
    failure_ = s;
    wake_pollers();  // a failure is readiness too (POLLERR)
  }
  kick();
}

void RdmaStream::note_failure(const char* what, const char* detail) {
  if (failure_detail_[0] == '\0') snprintf(failure_detail_, sizeof failure_detail_, "%s: %s", what, detail);
}

std::string RdmaStream::failure_detail() const {
  std::lock_guard lock(mu_);
  return failure_detail_;
}

void RdmaStream::kick() {
  // Wakes a thread asleep in wait() after another thread changed what it may be waiting for.
  link_->wake_sleeper();
  cv_.notify_all();
}

Status RdmaStream::post_write(const void* local, uint32_t length, uint32_t lkey, uint64_t remote_offset,
                              uint32_t imm, bool with_imm, int send_flags, uint64_t wr_kind) {
  return post_write_to(peer_rkey_, local, length, lkey, remote_offset, imm, with_imm, send_flags, wr_kind);
}

Status RdmaStream::post_write_to(uint32_t rkey, const void* local, uint32_t length, uint32_t lkey,
                                 uint64_t remote_offset, uint32_t imm, bool with_imm, int send_flags,
                                 uint64_t wr_kind) {
  // Callers check send_queue_has_room first: posting never waits, so it never recurses into progress.
  ibv_sge sge{reinterpret_cast<uint64_t>(local), length, lkey};
  ibv_send_wr wr{};
  wr.wr_id = StreamLink::work_id(index_, wr_kind);
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  // Signalled where a completion is awaited (StreamLink::post_send): a zero-copy write (the caller's
  // buffer is ours until it completes), an end (close, abort, release, "to TCP": the channel's last
  // sends, whose completion frees what it leaves on the link) and a zero-byte write (a keepalive, or
  // a wait's tail: signal_tail). Data copied into the mirror, credit updates, arms and wakeups are
  // not: the next signalled send completes them.
  bool awaited = wr_kind == kWrZeroCopy || (with_imm && imm_type(imm) == MessageType::kEnd) || (length == 0 && !with_imm);
  wr.send_flags = (awaited ? IBV_SEND_SIGNALED : 0) | send_flags;
  wr.sg_list = length > 0 ? &sge : nullptr;
  wr.num_sge = length > 0 ? 1 : 0;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote_offset;  // the peer's rings are registered at iova 0
  wr.wr.rdma.rkey = rkey;
  if (int e = link_->post_send(&wr); e != 0) {
    note_failure("posting a send failed", strerror(e));
    path_failed_ = true;
    return Status::kReset;
  }
  link_->on_channel_send_posted(index_);
  last_send_signalled_ = (wr.send_flags & IBV_SEND_SIGNALED) != 0;
  ++sends_since_keepalive_;
  // A copied message is counted as sent when it starts (stream_held.cpp), a zero-copy one after its post.
  if (wr_kind == kWrCopy) ledger_.posted(flow_->sent(), false);
  if (wr_kind == kWrZeroCopy) ledger_.posted(flow_->sent() + length, true);
  return Status::kOk;
}

Status RdmaStream::send_credits() {
  if (flow_->update_due() && send_queue_has_room(1)) {
    MailboxUpdate u = flow_->make_update();
    ++mailbox_seq_;
    MailboxRecord r{};
    r.seq = r.seq_end = mailbox_seq_;
    r.consumed = u.consumed;
    r.posted = u.posted;
    r.armed = u.armed;
    r.seen_consumed = u.seen_consumed;
    r.seen_posted = u.seen_posted;
    r.ring_gen = u.ring_gen;
    r.ring_rkey = ring_rkey(u.ring_gen);
    r.ring_size_log2 = static_cast<uint8_t>(std::countr_zero(u.ring_size));
    r.moved_gen = u.moved_gen;
    r.moved_at = u.moved_at;
    uint8_t* slot = link_->next_mailbox_slot();
    std::memcpy(slot, &r, sizeof r);
    // The mailbox stays after the peer's first ring, whichever ring our bytes go to now.
    if (Status s = post_write_to(peer_mailbox_rkey_, slot, kMailboxSize, link_->mailbox_lkey(), peer_ring_size_, 0,
                                 false, 0, kWrSignal);
        s != Status::kOk) {
      return s;
    }
    ++counters_.mailbox_updates_sent;
  }
  if (flow_->may_send_wakeup() && send_queue_has_room(1)) {
    uint64_t answered = flow_->on_wakeup_sent();
    return post_write(nullptr, 0, 0, 0, imm(MessageType::kWakeup, static_cast<uint32_t>(answered)), true, 0, kWrSignal);
  }
  return Status::kOk;
}

Status RdmaStream::request_wakeup() {
  // Blocked on the peer. Once per wakeup: the new arm count goes out with a mailbox update, then an
  // arm message, whose completion wakes the peer if it sleeps (RC order: the update lands first).
  if (!flow_->may_arm() || !send_queue_has_room(2)) return Status::kOk;  // already armed, or not yet
  flow_->arm();
  if (Status s = send_credits(); s != Status::kOk) return s;
  flow_->on_arm_sent();
  return post_write(nullptr, 0, 0, 0, imm(MessageType::kArm, static_cast<uint32_t>(flow_->arm_count())), true, 0,
                    kWrSignal);
}

namespace {

// Orders the mailbox's word loads (x86 keeps loads in order; the fence is for the compiler and for
// weaker CPUs). ThreadSanitizer rejects fences, and cannot see the adapter's writes they order against
// anyway: its builds keep only the compiler barrier.
inline void mailbox_load_fence() {
#if defined(__SANITIZE_THREAD__)
  std::atomic_signal_fence(std::memory_order_acquire);
#else
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
}

}  // namespace

RdmaStream::MailboxRead RdmaStream::read_mailbox(MailboxUpdate* update) {
  // The peer's RDMA Write may land in any order: seq is written at both ends; equal means whole.
  constexpr size_t kWords = sizeof(MailboxRecord) / 8;
  const volatile uint64_t* box = reinterpret_cast<const volatile uint64_t*>(ring_ + ring_size_);
  uint64_t words[kWords];
  words[kWords - 1] = box[kWords - 1];
  mailbox_load_fence();
  for (size_t i = 1; i + 1 < kWords; ++i) words[i] = box[i];
  mailbox_load_fence();
  words[0] = box[0];
  MailboxRecord r;
  std::memcpy(&r, words, sizeof r);
  if (r.seq != r.seq_end) return MailboxRead::kTorn;
  if (r.seq == last_mailbox_seq_read_) return MailboxRead::kNothingNew;
  last_mailbox_seq_read_ = r.seq;
  // A ring size beyond what a shift can say reads as none: flow control refuses the offer.
  uint64_t ring_size = r.ring_size_log2 < 64 ? uint64_t{1} << r.ring_size_log2 : 0;
  *update = {r.consumed, r.posted, r.armed, r.seen_consumed, r.seen_posted, r.ring_gen, ring_size, r.moved_gen, r.moved_at};
  if (r.ring_gen != 0) rings_.note_offered_rkey(r.ring_rkey);  // used only once flow control took the offer
  return MailboxRead::kNew;
}

Status RdmaStream::take_mailbox(bool must_be_whole) {
  MailboxUpdate update{};
  MailboxRead read = read_mailbox(&update);
  // A record being overwritten reads torn for as long as the adapter takes to place the next one (a
  // few microseconds at most): read again. One that stays torn is the peer's doing, or a write cut
  // short by a failing path; only a data message that cannot be placed without the record fails the
  // stream for it (must_be_whole), other callers look again at their next progress.
  for (int tries = 0; read == MailboxRead::kTorn; ++tries) {
    if (tries == 100000) {
      if (!must_be_whole) return Status::kOk;
      note_failure("the peer's mailbox broke the protocol", "a record that stayed torn");
      return Status::kProtocolError;
    }
    read = read_mailbox(&update);
  }
  if (read != MailboxRead::kNew) return Status::kOk;
  if (FlowError e = flow_->on_peer_mailbox(update); e != FlowError::kNone) {
    note_failure("the peer's mailbox broke the protocol", to_string(e));
    return Status::kProtocolError;
  }
  return Status::kOk;
}

Status RdmaStream::handle_completion(const ibv_wc& wc) {
  ++counters_.completions;
  // The wr_id's kind, not the opcode: undefined in an error completion.
  bool is_send = StreamLink::work_kind(wc.wr_id) != kWrReceive;
  if (!flow_) return is_send ? Status::kOk : Status::kProtocolError;  // an open not answered yet
  if (is_send) note_send_completion(wc);
  if (wc.status != IBV_WC_SUCCESS) {
    // Once the peer's application left the channel in order (peer_left), or once we disconnected,
    // the queue pair's flushed work is the expected tail of the connection. So is a credit update or
    // keepalive that finds the peer gone after it left, when every byte of ours was acknowledged
    // before it (RC completes in order): the peer had all it asked for; it may have closed its stream
    // before our update reached it, and what is left to read here is whole. Anything else is the
    // connection failing: bytes of ours it may not have got (after a shutdown alone it still reads).
    bool flushed_tail = wc.status == IBV_WC_WR_FLUSH_ERR && (disconnected_ || (disconnect_seen_ && peer_left()));
    bool late_signal = StreamLink::work_kind(wc.wr_id) == kWrSignal && peer_left() && ledger_.in_flight() == 0 && !close_owed_;
    if (!flushed_tail && !late_signal) {
      note_failure(is_send ? "a send failed" : "a receive failed", ibv_wc_status_str(wc.status));
      path_failed_ = true;
      return Status::kReset;
    }
    disconnect_seen_ = true;  // nothing more can be sent
    return Status::kOk;
  }
  if (is_send) return Status::kOk;
  if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) return Status::kProtocolError;
  uint32_t imm = ntohl(wc.imm_data);
  FlowError e = FlowError::kNone;
  switch (imm_type(imm)) {
    case MessageType::kData:
      if (imm_arg(imm) != (wc.byte_len & kImmArgMask)) return Status::kProtocolError;
      // While the peer's answer to our ring offer is awaited its bytes may already be in the new ring:
      // the update saying so was written before them (RC order), and is read first.
      if (flow_->ring_answer_awaited()) {
        if (Status s = take_mailbox(true); s != Status::kOk) return s;
      }
      e = flow_->on_data_arrived(wc.byte_len);
      if (e == FlowError::kNone && flow_->window_full()) rings_.note_window_filled();  // the last message of a full window
      break;
    case MessageType::kWakeup:
      e = flow_->on_wakeup_arrived(imm_arg(imm));
      ++counters_.wakeups_received;
      break;
    case MessageType::kArm:
      e = flow_->on_arm_arrived();  // the count itself came with the mailbox update before it
      break;
    case MessageType::kEnd:
      if (imm_arg(imm) == kEndAbort || imm_arg(imm) == kEndAskAgain) {
        peer_aborted_ = true;
        peer_asked_again_ = imm_arg(imm) == kEndAskAgain;
        if (!link_->stopped()) link_->post_receive();  // the link goes on: the receive is the link's
        return Status::kReset;
      }
      if (is_release(imm_arg(imm))) {
        // The peer writes nothing more here (links.md, "Ending a channel"): like a disconnect of this
        // channel alone, answered by our own release. Its receive was the one kept for it. A close
        // may come with it (the peer had no receive of ours for its close alone): the end, then this.
        FlowError r = imm_arg(imm) == kEndCloseRelease ? flow_->on_close_release_arrived()
                                                        : flow_->on_release_arrived(peer_aborted_);
        if (r != FlowError::kNone) {
          note_failure("the peer broke the protocol", to_string(r));
          return Status::kProtocolError;
        }
        if (!link_->stopped()) link_->post_receive();
        // Answered at once, whatever our application does (else at the next serve). Our close may
        // still wait for a receive of the peer's, which a peer that released gives back no more
        // (its update may even be unread, behind this completion): it goes with the answer, as a
        // close that finds no receive goes with its release, never a release alone before it.
        if (close_owed_) send_close_with_release();
        disconnect_seen_ = true;
        release_owed_ = !flow_->release_sent();
        send_release();
        return Status::kOk;
      }
      if (imm_arg(imm) == kEndToTcp || imm_arg(imm) == kEndToTcpReturning) {
        peer_returns_ = imm_arg(imm) == kEndToTcpReturning;
        e = flow_->on_move_arrived();
        move_owed_ = !move_sent_;  // answered at once, the application's calls or not
        break;
      }
      if (imm_arg(imm) != kEndClose) return Status::kProtocolError;
      e = flow_->on_close_arrived();
      break;
  }
  if (e != FlowError::kNone) {
    note_failure("the peer broke the protocol", to_string(e));
    return Status::kProtocolError;
  }
  if (link_->stopped()) return Status::kOk;  // the queue pair is in the error state: nothing arrives again
  if (Status s = link_->post_receive(); s != Status::kOk) return s;
  flow_->on_reposted(1);
  return Status::kOk;
}

void RdmaStream::on_cm_news(const StreamLink::CmNews& news) {
  if (!news.disconnected && !news.device_removed) return;
  if (!flow_) {
    on_answer(nullptr);  // an open that waits for its answer: the link is gone
    return;
  }
  if (news.disconnected) disconnect_seen_ = true;
  if (news.device_removed && !peer_left()) {
    note_failure("the RDMA device", "was removed");
    path_failed_ = true;
  }
  touch();
}

Status RdmaStream::progress() {
  if (failed()) return failure_;
  if (Status s = LinkProgress::hand_out(*link_, *this); s != Status::kOk) return s;
  return serve();
}

Status RdmaStream::serve() {
  if (!flow_) return Status::kOk;  // an open not answered yet: nothing of ours to serve
  if (release_owed_) send_release();
  // After the peer left in order (its close and release) a disconnect is the normal end; before it,
  // the peer (or its process, or the link) is gone: a reset, never a clean end of stream, nor bytes
  // of ours taken for a reader who may still wait for them (after its shutdown alone).
  if (disconnect_seen_ && !peer_left() && !disconnected_) {
    note_failure("the peer disconnected", peer_done() ? "after its end, without its release" : "without an end of its stream");
    path_failed_ = true;  // or the peer died: its TCP socket tells (docs/protocol.md)
    fail(Status::kReset);
    return failure_;
  }
  // Read whole, never skipped when torn: a record reads torn while the peer's next one lands over it,
  // and skipping it lost the arm it carried (the arm message had come, its count was in the record we
  // skipped, and the newer record that landed meanwhile raises no completion): both sides slept,
  // each waiting for the other, until a keepalive ran progress again (integration.fault_wire.pair
  // with 64 KiB rings and a slow reader: bursts of bytes every 10 to 20 s, one run in three).
  if (Status s = take_mailbox(false); s != Status::kOk) {
    fail(s);
    return failure_;
  }
  if (disconnect_seen_ || disconnected_) return Status::kOk;  // nothing can be sent any more
  if (held_.due) {
    if (Status s = post_held(); s != Status::kOk && s != Status::kWouldBlock) {
      fail(s);
      return failure_;
    }
  }
  if (flow_->ring_offer_pending()) answer_ring_offer();
  settle_rings();
  // After the mailbox: the peer's arm (it waits for room) comes in its update, and our answer to it
  // (send_credits, below) would clear it.
  maybe_grow_ring();
  if (close_owed_) send_owed_close();
  if (move_owed_ && !close_owed_) send_move_marker();  // a close asked for first goes first
  if (Status s = send_credits(); s != Status::kOk) {
    fail(s);
    return s;
  }
  return Status::kOk;
}

bool RdmaStream::post_owed_end(uint32_t which, bool credit) {
  // An end message (close, "to TCP") takes a receive of the peer's; without one it waits for the
  // peer's next update, and a wakeup is asked for so that one comes. Nothing of the application's
  // waits for it.
  // Our held message first: the end comes after every byte written (stream_held.cpp).
  if (held_.bytes > 0) {
    held_.due = true;
    if (post_held() != Status::kOk) return false;
  }
  if (!credit || !send_queue_has_room(1)) {
    request_wakeup();
    return false;
  }
  if (Status s = post_write(nullptr, 0, 0, 0, imm(MessageType::kEnd, which), true, 0, kWrSignal);
      s != Status::kOk) {
    fail(s);
    return false;
  }
  return true;
}

void RdmaStream::send_move_marker() {
  if (!post_owed_end(move_returns_ ? kEndToTcpReturning : kEndToTcp, flow_->may_send_move())) return;
  flow_->on_move_sent();
  move_owed_ = false;
  move_sent_ = true;
  // A writer waiting for credits stops at the marker, and pollers see the move.
  cv_.notify_all();
  link_->wake_sleeper();
  if (polled_) wake_pollers();
}

void RdmaStream::send_owed_close() {
  if (!post_owed_end(kEndClose, flow_->may_send_close())) return;
  flow_->on_close_sent();
  close_owed_ = false;
  cv_.notify_all();
}

void RdmaStream::fail_and_stop(Status s) {
  fail(s);
  link_->stop();  // handle_completion reposts no receive from here
}

void RdmaStream::wait_out_sends(std::unique_lock<std::mutex>& lock) {
  // A channel that failed by its peer's word (its abort, a lie in its cursors) on a link that works:
  // its sends still complete as the peer's adapter acknowledges them. The peer's ring stays registered
  // until our release, which goes after them (RC order; docs/links.md, "Ending a channel"). Stopping
  // the link instead would fail every other channel of it over to TCP, and reset those whose
  // application had closed, for one connection's reset (integration/soak-chaos).
  auto deadline = Deadline::in_ms(options_.timeout_ms);
  while (ledger_.zero_copy_in_flight() > 0 && !link_->stopped() && !deadline.passed()) {
    if (LinkProgress::poll(*link_, this) > 0) {
      LinkProgress::serve_touched(*link_, this);
      link_->cv().notify_all();
      continue;
    }
    lock.unlock();
    sched_yield();  // on a software device the adapter's work needs this CPU (spin_pause.h)
    lock.lock();
  }
}

void RdmaStream::drain_after_failure(std::unique_lock<std::mutex>& lock) {
  // A queue pair in the error state flushes every outstanding work request with a completion; until
  // each is polled, the adapter may still be reading its buffer. The completions queued before the
  // error are taken as they would have been: a data message that arrived counts (a failover reports
  // it as received), one flushed does not. The peer's abort or a protocol violation among them is
  // the peer's word, not the path's. The link's drain marker (StreamLink::kWrDrain) ends it.
  auto deadline = Deadline::in_ms(options_.timeout_ms);
  while (link_->sends_outstanding() > 0 && !deadline.passed()) {
    ibv_wc wcs[16];
    int n = link_->poll(wcs, 16);
    for (int i = 0; i < n; ++i) {
      if (StreamLink::work_kind(wcs[i].wr_id) != kWrReceive) {
        // The unsignalled sends before it completed before it, as LinkProgress::dispatch counts them.
        for (ibv_wc done{}; link_->take_older_completion(wcs[i], &done);) take_drained(done);
      }
      take_drained(wcs[i]);
    }
    if (n < 0) break;
    if (n == 0) {
      lock.unlock();
      sched_yield();
      lock.lock();
    }
  }
}

void RdmaStream::take_drained(const ibv_wc& wc) {
  uint64_t kind = StreamLink::work_kind(wc.wr_id);
  bool send = kind != kWrReceive;
  if (kind == StreamLink::kWrDrain) {
    link_->on_send_completed();
    return;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    // Flushed (or the failure itself): ours counted off.
    uint32_t index = StreamLink::work_channel(wc.wr_id);
    RdmaStream* target = send ? link_->channel(index) : this;
    if (send && target != nullptr && target != this) {
      // Another channel's send, flushed by the link's stop: its path is gone too, and it is told as
      // dispatch tells it (a failure it may fail over from). Counted off in silence, a zero-copy
      // write of its that waited for this completion returned as if its bytes had arrived, and they
      // were in no mirror when its failover resent them: stale bytes on TCP (integration/soak-chaos).
      take_completion(wc);
      return;
    }
    ++counters_.completions;
    if (!send) return;
    if (target == this) {
      note_send_completion(wc);
    } else {
      link_->on_send_completed();  // a send of the link's own, or of a channel that went
    }
    link_->on_channel_send_completed(index);
    return;
  }
  // A message that arrived, or a send that completed: whose it is, the immediate or the wr_id says.
  // Another channel's (or the link's own) is handed on as it would have been: taken here as this
  // channel's, its bytes would count as ours (a failover record claiming bytes the peer never sent
  // on this channel, and the ring's stale bytes read as the peer's).
  uint32_t index = send ? StreamLink::work_channel(wc.wr_id) : imm_channel(ntohl(wc.imm_data));
  if (link_->channel(index) != this) {
    take_completion(wc);
    return;
  }
  if (send) link_->on_channel_send_completed(index);
  if (Status s = handle_completion(wc); s != Status::kOk) {
    path_failed_ = false;
    if (failure_ == Status::kReset) failure_ = s;
  }
}

bool RdmaStream::moved_locked() const {
  if (left_path_) return true;  // the failover (leave_path) took every unread byte
  return move_sent_ && flow_->peer_moved() && flow_->readable() == 0 && prefix_left() == 0;
}

bool RdmaStream::moved() const {
  std::lock_guard lock(mu_);
  return moved_locked();
}

bool RdmaStream::writes_moved() const {
  std::lock_guard lock(mu_);
  return move_sent_;
}

bool RdmaStream::reads_moved() const {
  std::lock_guard lock(mu_);
  return flow_->peer_moved() && !flow_->peer_closed() && flow_->readable() == 0 && prefix_left() == 0;
}

bool RdmaStream::write_was_shut() const {
  std::lock_guard lock(mu_);
  return write_shut_;
}

Status RdmaStream::arm_if_relied_on(bool* news) {
  // An event loop arms the link's queue itself just before it sleeps (LinkWatch::arm_for_sleep). A
  // poller that is counted (the switch's wait sleeps right after such a call, with no look that
  // would arm), or one outside the module's waits (eager), relies on the call to arm it.
  *news = false;
  return link_->relied_on() ? LinkProgress::arm(*link_, *this, news) : Status::kOk;
}

Status RdmaStream::wait(std::unique_lock<std::mutex>& lock, bool interruptible, int max_sleep_ms) {
  if (failed()) return failure_;
  // A thread of ours that waits on this stream (for the peer's answer, say) sends what it held first,
  // where the kernel would wait up to 200 ms to send a corked segment.
  if (held_.bytes > 0) {
    held_.due = true;
    post_held();
  }
  int sleep_ms = options_.keepalive_ms > 0 ? options_.keepalive_ms : -1;
  if (max_sleep_ms >= 0 && (sleep_ms < 0 || max_sleep_ms < sleep_ms)) sleep_ms = max_sleep_ms;
  LinkProgress::WaitEnd end = LinkProgress::wait(*link_, *this, lock, options_.busy_poll_us, sleep_ms, max_sleep_ms);
  switch (end.woke) {
    case LinkProgress::Woke::kLook:
      return Status::kOk;
    case LinkProgress::Woke::kFailed:
      return end.status;
    case LinkProgress::Woke::kTouched:
      touched_ = false;
      return serve();
    case LinkProgress::Woke::kEvent:
      // What woke us may be what an application's poller waits for (bytes to read, room to write),
      // and the sleep has just taken its event from the channel: tell the pollers to look (if anyone
      // polls: a program that only blocks pays no system call for it).
      if (polled_) wake_pollers();
      return Status::kOk;
    case LinkProgress::Woke::kQuiet:
      if (failed() || sleep_ms != options_.keepalive_ms) return Status::kOk;
      look_idle();  // a blocked call's periodic look, as the path watcher's
      return keepalive_locked();
    case LinkProgress::Woke::kInterrupted:
      return interruptible ? Status::kInterrupted : Status::kOk;
  }
  return Status::kOk;
}

Status RdmaStream::keepalive_locked() {
  if (!flow_ || failed() || disconnected_ || disconnect_seen_) return failure_;
  // After the peer's end its queue pair may be gone any moment (its close destroys it): a probe would
  // only count a retry error at rxe. Our own sends, if any, still find a dead path.
  if (flow_->peer_closed()) return Status::kOk;
  if (sends_since_keepalive_ == 0 && send_queue_has_room(1)) {
    // A zero-byte RDMA Write consumes no receive and raises nothing at the peer; only its
    // acknowledgement matters. A dead peer never sends one: the completion fails after the retries.
    if (Status s = post_write(nullptr, 0, 0, 0, 0, false, 0, kWrSignal); s != Status::kOk) return s;
    ++counters_.keepalives_sent;
  }
  sends_since_keepalive_ = 0;
  return Status::kOk;
}

Status RdmaStream::signal_tail() {
  if (last_send_signalled_ || link_->sends_of(index_) == 0 || !send_queue_has_room(1) || link_->stopped()) {
    return Status::kOk;
  }
  // A zero-byte RDMA Write: it consumes no receive of the peer's and raises nothing there.
  return post_write(nullptr, 0, 0, 0, 0, false, 0, kWrSignal);
}

Status RdmaStream::keepalive() {
  OwnCalls own;  // own_calls.h
  std::unique_lock lock(mu_);
  if (Status s = progress(); s != Status::kOk) return s;
  return keepalive_locked();
}

void RdmaStream::count_event_sleeper(int change) {
  std::lock_guard lock(mu_);
  link_->count_event_sleeper(change);
}

void RdmaStream::wake_pollers() {
  OwnCalls own;  // own_calls.h
  readiness_.look_again();
}

void RdmaStream::note_link_fired(bool completions, bool cm) { link_->note_fired(completions, cm); }

void RdmaStream::link_descriptors(int* completions, int* cm_events) const {
  std::lock_guard lock(mu_);
  *completions = link_->completion_fd();
  *cm_events = link_->cm_watched() ? link_->cm_fd() : -1;
}

void RdmaStream::spin_link() {
  std::lock_guard lock(mu_);
  LinkProgress::spin(*link_);
}

int RdmaStream::spin_rule(bool* adaptive, bool* yields) const {
  *yields = link_->spin_yields();
  return link_->busy_poll_us(adaptive);
}

Readiness RdmaStream::readiness(bool want_writable, bool take_link_events, bool only_fired, bool arm) {
  OwnCalls own;  // own_calls.h
  std::unique_lock lock(mu_);
  polled_ = true;
  if (take_link_events) LinkProgress::take_events(*link_, *this, only_fired);
  Readiness r;
  for (;;) {
    progress();
    r.failed = failed();
    r.peer_closed = flow_->peer_closed();
    r.read_shut = read_shut_;
    r.error_pending = error_pending_;
    r.hung_up = (write_shut_ || wrote_after_peer_left_) && (r.peer_closed || read_shut_);
    r.bytes_readable = flow_->readable() + prefix_left();
    r.readable = r.failed || r.peer_closed || read_shut_ || r.bytes_readable > 0;
    r.writable = r.failed || write_shut_ || move_sent_ || disconnect_seen_ || (takes_bytes() && send_queue_has_room(2));
    r.moved = moved_locked();
    if (failover_due()) {
      // Failing over: nothing is ready until the connection is on TCP or reset (finish_leaving and
      // give_up_path wake the pollers); nothing is armed, the queue pair being dead.
      r.failed = r.readable = r.writable = false;
      return r;
    }
    if ((r.readable && r.writable) || r.moved) return r;
    // Not writable: ask the peer to tell us when it is. Either way, arm the channel so that the fd
    // fires on the next change; a completion caught while arming is news to look at first.
    if (!r.writable && !r.failed && want_writable) {
      if (held_.bytes > 0) {  // the caller will wait for room: what it held goes first
        held_.due = true;
        post_held();
      }
      request_wakeup();
      spill_when_stuck();  // a caller waiting to write may be what the peer's writer waits for
    }
    // A poll or select call sleeps on the link's event next: armed now. An epoll set's wait arms its
    // links itself, just before it sleeps (link_watch.h, arm_for_sleep), unless the link is eager.
    if ((!take_link_events || !arm) && !link_->eager()) return r;
    bool news = false;
    if (LinkProgress::arm(*link_, *this, &news) != Status::kOk) fail(Status::kReset);
    if (!news && !failed()) return r;
  }
}

RdmaStream::PollMark RdmaStream::poll_mark_locked() const {
  PollMark m;
  m.readable = flow_->readable() + prefix_left();
  bool ends[] = {failed(), flow_->peer_closed(), flow_->peer_moved(), read_shut_, error_pending_, write_shut_,
                 move_sent_, disconnect_seen_, wrote_after_peer_left_, moved_locked(), failover_due()};
  for (unsigned i = 0; i < sizeof ends / sizeof ends[0]; ++i) m.ends |= ends[i] ? 1u << i : 0u;
  m.writable = takes_bytes() && link_->send_queue_has_room(2);
  return m;
}

void RdmaStream::want_writable() {
  OwnCalls own;  // own_calls.h
  std::lock_guard lock(mu_);
  if (!flow_ || failed() || write_shut_ || move_sent_ || disconnect_seen_ || failover_due()) return;
  if (!takes_bytes()) request_wakeup();
}

StreamCounters RdmaStream::counters() const {
  std::unique_lock lock(mu_);
  StreamCounters c = counters_;
  c.zcopy_in_flight = ledger_.zero_copy_in_flight();
  c.end_waiting = close_owed_ ? 1 : 0;
  if (link_->registrations() != nullptr) c.registrations = link_->registrations()->counters();
  return c;
}

}  // namespace tcp2rdma::transport
