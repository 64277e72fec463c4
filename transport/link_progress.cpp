#include "link_progress.h"

#include <arpa/inet.h>

#include <vector>

#include "own_calls.h"
#include "rdma_stream.h"
#include "stream_link.h"
#include "wire.h"

namespace tcp2rdma::transport {

Status LinkProgress::dispatch(StreamLink& link, const ibv_wc& wc, RdmaStream* caller) {
  ++link.dispatched_;
  if (StreamLink::work_kind(wc.wr_id) != StreamLink::kWrReceive) {
    // The unsignalled sends posted before this one completed, successfully, before it (RC order; a
    // failed one would have raised a completion of its own): each is handed out as if it had raised
    // one, oldest first, then this one.
    Status mine = Status::kOk;
    for (ibv_wc done{}; link.take_older_completion(wc, &done);) {
      if (Status s = dispatch_one(link, done, caller); s != Status::kOk && mine == Status::kOk) mine = s;
    }
    Status s = dispatch_one(link, wc, caller);
    return mine != Status::kOk ? mine : s;
  }
  return dispatch_one(link, wc, caller);
}

Status LinkProgress::dispatch_one(StreamLink& link, const ibv_wc& wc, RdmaStream* caller) {
  uint64_t kind = StreamLink::work_kind(wc.wr_id);
  // The marker a stopped link posts (StreamLink::kWrDrain): the sends before it were counted off
  // above; it is news to nobody.
  if (kind == StreamLink::kWrDrain) {
    link.on_send_completed();
    return Status::kOk;
  }
  if (kind == StreamLink::kWrReceive && wc.status != IBV_WC_SUCCESS) {
    // A flushed receive names no channel: the queue pair is in the error state, which is every
    // channel's to judge (a failure, or the expected tail of one that ended).
    Status mine = Status::kOk;
    for (RdmaStream* c : link.channels()) {
      if (c == nullptr || !c->flow_) continue;
      Status s = c->handle_completion(wc);
      if (c == caller) {
        mine = s;
      } else {
        if (s != Status::kOk) c->fail(s);
        c->touch();
      }
    }
    return mine;
  }
  uint32_t index = kind == StreamLink::kWrReceive ? imm_channel(ntohl(wc.imm_data)) : StreamLink::work_channel(wc.wr_id);
  if (kind != StreamLink::kWrReceive && link.channel(index) == nullptr) {
    // A send of the link's own (an open or answer), or of a channel that went: only the link's
    // accounting is left to do (a retired channel's memory may be freed by it). Our own wr_id: no lie.
    link.on_send_completed();
    link.on_channel_send_completed(index);
    if (index != kLinkChannel || wc.status == IBV_WC_SUCCESS) return Status::kOk;
    fail(link, "the link's setup", ibv_wc_status_str(wc.status), Status::kReset);
    return caller != nullptr ? caller->failure_ : Status::kReset;
  }
  if (kind != StreamLink::kWrReceive) link.on_channel_send_completed(index);
  if (index == kLinkChannel) {
    // A message of the link itself came in: an open, or an answer.
    if (wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
        imm_type(ntohl(wc.imm_data)) == MessageType::kEnd && on_link_message(link, imm_arg(ntohl(wc.imm_data))) == Status::kOk) {
      return Status::kOk;
    }
    fail(link, "the link's setup", "a malformed message", Status::kProtocolError);
    return caller != nullptr ? caller->failure_ : Status::kProtocolError;
  }
  RdmaStream* target = link.channel(index);
  if (target == nullptr && link.is_retired(index)) {
    // A channel that went: what the peer still sent it is dropped (as TCP drops what arrives after a
    // close), its receive reposted; its release lets the link free its memory.
    uint32_t imm = ntohl(wc.imm_data);
    if (!link.stopped() && link.post_receive() != Status::kOk) return Status::kResources;
    link.on_retired_message(index, imm_type(imm) == MessageType::kEnd && is_release(imm_arg(imm)));
    return Status::kOk;
  }
  if (target == nullptr || (kind == StreamLink::kWrReceive && !target->flow_)) {
    // A message for no channel of ours (or one whose open is not answered yet): the peer broke the
    // link's protocol, which is every channel's violation (a reset each, as a lie within one is).
    fail(link, "the peer broke the protocol", "a message for a channel it does not have", Status::kProtocolError);
    return caller != nullptr ? caller->failure_ : Status::kProtocolError;
  }
  if (target == caller) {
    // The caller's own news, which may be what another thread of its application polls for (a
    // writer's thread takes the completions its reader's poll waits on): told, except a send's
    // completion that changes nothing a poller sees (it frees a slot of the link's send queue: news
    // only to a channel that had no room), which would wake an event loop that just wrote a reply,
    // for nothing, once a request. A message of the peer's is always told: what it brings (bytes,
    // an end, credits through the mailbox) may be served only after this (serve()).
    bool marked = target->polled_ && target->flow_ != nullptr && kind != StreamLink::kWrReceive;
    RdmaStream::PollMark before = marked ? target->poll_mark_locked() : RdmaStream::PollMark{};
    Status s = target->handle_completion(wc);
    if (target->polled_ && (!marked || s != Status::kOk || RdmaStream::PollMark::news(before, target->poll_mark_locked()))) {
      target->wake_pollers();
    }
    // The channel's other thread (a writer waiting for its acknowledgement, a reader for bytes) may
    // wait on the link's condition for exactly this: it looks again (costs nothing with no waiter).
    link.cv().notify_all();
    return s;
  }
  if (Status s = target->handle_completion(wc); s != Status::kOk) target->fail(s);
  target->touch();
  return Status::kOk;
}

void LinkProgress::touch_room_waiters(StreamLink& link) {
  if (!link.any_waits_for_room() || !link.send_queue_has_room(1)) return;
  std::vector<uint32_t> waiting;
  link.take_room_waiters(waiting);
  for (uint32_t index : waiting) {
    RdmaStream* c = link.channel(index);
    if (c == nullptr || !c->waits_for_send_room_) continue;  // went, or the index is another's now
    c->waits_for_send_room_ = false;
    c->touch();
  }
}

void LinkProgress::serve_touched(StreamLink& link, RdmaStream* except) {
  touch_room_waiters(link);
  if (!link.any_touched()) return;
  std::vector<uint32_t> due;
  link.take_touched(due);
  bool any = false;
  for (uint32_t index : due) {
    RdmaStream* c = link.channel(index);
    if (c == nullptr || !c->touched_) continue;  // went, served meanwhile, or the index is another's
    if (c == except) {
      link.note_touched(index);  // the caller serves itself; still due for whoever serves next
      continue;
    }
    c->touched_ = false;
    any = true;
    if (!c->failed()) c->serve();
    // Its pollers may sleep on the link's event this thread took: told always, not only once
    // readiness() was called (a caller that got kWouldBlock sleeps before it calls readiness(); the
    // preload's path watcher, progressing another channel of the link, would otherwise take the
    // completion that poll waits for).
    c->wake_pollers();
  }
  // Their threads may wait on the link's condition for exactly this news.
  if (any) link.cv().notify_all();
}

bool LinkProgress::take_cm_news(StreamLink& link) {
  StreamLink::CmNews news = link.take_cm_events();
  if (!news.disconnected && !news.device_removed) return false;  // the usual case: no walk of the channels
  // A disconnect is judged after what came before it: a peer's close waits for its end and release
  // to be acknowledged before its link's last channel disconnects, so they are in our queue by now.
  // Taken after it, a channel whose release was still queued read the disconnect as its path
  // failing (integration.many_connections.pair: 1000 channels closed at once, hundreds failed over).
  if (news.disconnected) poll(link);
  for (RdmaStream* c : link.channels()) {
    if (c != nullptr) c->on_cm_news(news);
  }
  return true;
}

void LinkProgress::tell_cm_news(StreamLink& link) {
  if (!link.cm_watched()) return;  // a server's link before its accept: the listener's events
  take_cm_news(link);
}

Status LinkProgress::take_all(StreamLink& link) {
  OwnCalls own;  // own_calls.h
  tell_cm_news(link);
  ibv_wc wcs[16];
  int n = 0;
  while ((n = link.poll(wcs, 16)) > 0) {
    for (int i = 0; i < n; ++i) dispatch(link, wcs[i], nullptr);
  }
  if (n < 0) fail(link, "the completion queue", "failed", Status::kReset);
  serve_touched(link, nullptr);
  link.cv().notify_all();
  return n < 0 || link.stopped() ? Status::kReset : Status::kOk;
}

void LinkProgress::drain(StreamLink& link, bool arm, bool cm_when_quiet, bool lazy) {
  OwnCalls own;  // own_calls.h
  if (!cm_when_quiet) tell_cm_news(link);
  bool took = link.take_channel_events();
  if (lazy && !arm && !link.relied_on()) {
    // Nobody else sleeps on the event: the queue stays unarmed until a thread is about to (the
    // caller, an event loop, arms it before its own sleep: LinkWatch::arm_for_sleep).
    poll(link);
  } else if (took || arm) {
    // As take_events, for no channel of its own: the event taken, the queue is armed again before the
    // lock goes, with what came before the arming handed out.
    arm_and_hand_out(link);
  }
  // After the completions: a disconnect is judged (serve) only after what came before it was seen.
  if (cm_when_quiet && !took) tell_cm_news(link);
  serve_touched(link, nullptr);
  // A channel's thread asleep on the link may have been waiting for the event taken here.
  link.wake_sleeper();
  link.cv().notify_all();
}

int LinkProgress::poll(StreamLink& link, RdmaStream* caller) {
  ibv_wc wcs[16];
  int n = 0, taken = 0;
  while ((n = link.poll(wcs, 16)) > 0) {
    for (int i = 0; i < n; ++i) dispatch(link, wcs[i], caller);
    taken += n;
  }
  if (n < 0) fail(link, "the completion queue", "failed", Status::kReset);
  return taken;
}

int LinkProgress::spin(StreamLink& link) {
  OwnCalls own;  // own_calls.h
  int taken = poll(link);
  if (taken == 0) return 0;
  serve_touched(link, nullptr);
  link.cv().notify_all();
  return taken;
}

bool LinkProgress::arm_and_hand_out(StreamLink& link, RdmaStream* caller) {
  bool any = false;
  for (;;) {
    bool got = false;
    ibv_wc wc;
    if (link.arm_and_poll(&wc, &got) != Status::kOk) {
      fail(link, "the completion queue", "failed", Status::kReset);
      return any;
    }
    if (!got) return any;
    if (Status s = dispatch(link, wc, caller); s != Status::kOk && caller != nullptr) caller->fail(s);
    any = true;
  }
}

bool LinkProgress::arm_for_sleep(StreamLink& link) {
  OwnCalls own;  // own_calls.h
  // A stopped link raises no completion worth waking for (its flushed work was taken when it
  // stopped); a failed arming fails the link, which tells its channels' pollers itself.
  if (link.stopped()) return false;
  bool any = arm_and_hand_out(link);
  if (any) {
    serve_touched(link, nullptr);
    link.cv().notify_all();
  }
  return any;
}

void LinkProgress::fail(StreamLink& link, const char* what, const char* detail, Status s) {
  for (RdmaStream* c : link.channels()) {
    if (c == nullptr) continue;
    if (c->open_state_ == RdmaStream::OpenState::kWaiting) c->on_answer(nullptr);
    if (c->failed()) continue;
    c->note_failure(what, detail);
    c->path_failed_ = s == Status::kReset;  // the path's failure, not the peer's word
    c->fail(s);
  }
  // No channel opens on it again (the link table and the listener pass over a disconnected link),
  // and the peer learns it at once: its channels end as ours did. A link whose peer broke the
  // protocol once is not trusted with another connection, and what each side believes of the
  // other's channels may differ from here on.
  if (!link.disconnected()) link.disconnect();
}

}  // namespace tcp2rdma::transport
