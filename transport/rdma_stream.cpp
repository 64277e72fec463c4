#include "rdma_stream.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tcp2rdma::transport {
namespace {

constexpr size_t kMailboxSlot = 64;

// Waits for the next connection-manager event on `channel`, up to `timeout_ms`.
Status next_cm_event(rdma_event_channel* channel, int timeout_ms, rdma_cm_event** event) {
  pollfd p{channel->fd, POLLIN, 0};
  int ready = ::poll(&p, 1, timeout_ms);
  if (ready == 0) return Status::kTimeout;
  if (ready < 0 || rdma_get_cm_event(channel, event) != 0) return Status::kReset;
  return Status::kOk;
}

Status status_of_cm_event(rdma_cm_event_type type) {
  switch (type) {
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
      return Status::kNoRoute;
    case RDMA_CM_EVENT_REJECTED:
      return Status::kRejected;
    default:
      return Status::kReset;
  }
}

// Waits for `want`; anything else is the failure it stands for.
Status expect_cm_event(rdma_event_channel* channel, int timeout_ms, rdma_cm_event_type want,
                       SetupInfo* peer_setup = nullptr) {
  rdma_cm_event* event = nullptr;
  Status s = next_cm_event(channel, timeout_ms, &event);
  if (s != Status::kOk) return s;
  rdma_cm_event_type type = event->event;
  if (type == want && peer_setup != nullptr) {
    if (event->param.conn.private_data_len < sizeof(SetupInfo)) {
      rdma_ack_cm_event(event);
      return Status::kProtocolError;
    }
    std::memcpy(peer_setup, event->param.conn.private_data, sizeof(SetupInfo));
  }
  rdma_ack_cm_event(event);
  return type == want ? Status::kOk : status_of_cm_event(type);
}

uint8_t* allocate(size_t bytes) {
  void* p = std::aligned_alloc(4096, (bytes + 4095) & ~size_t{4095});
  if (p != nullptr) std::memset(p, 0, bytes);
  return static_cast<uint8_t*>(p);
}

Status registration_failure() { return errno == ENOMEM || errno == EPERM ? Status::kMemoryLock : Status::kResources; }

}  // namespace

// ---- setup -------------------------------------------------------------------------------------------

Status RdmaStream::create_resources(rdma_cm_id* id, const StreamOptions& options) {
  options_ = options;
  id_ = id;
  if (id->verbs == nullptr) return Status::kNoDevice;
  comp_channel_ = ibv_create_comp_channel(id->verbs);
  if (comp_channel_ == nullptr) return Status::kResources;
  int cq_size = options.send_queue_depth + options.recv_queue_depth;
  cq_ = ibv_create_cq(id->verbs, cq_size, nullptr, comp_channel_, 0);
  if (cq_ == nullptr) return Status::kResources;
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = cq_;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = options.send_queue_depth;
  attr.cap.max_recv_wr = options.recv_queue_depth;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  if (rdma_create_qp(id, nullptr, &attr) != 0) return Status::kResources;

  ring_size_ = uint64_t{1} << options.ring_size_log2;
  ring_ = allocate(ring_size_ + kMailboxSlot);
  if (ring_ == nullptr) return Status::kResources;
  ring_mr_ = ibv_reg_mr(id->pd, ring_, ring_size_ + kMailboxSlot, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (ring_mr_ == nullptr) return registration_failure();
  mailbox_out_ = allocate(kMailboxSlot * options.send_queue_depth);
  if (mailbox_out_ == nullptr) return Status::kResources;
  mailbox_out_mr_ = ibv_reg_mr(id->pd, mailbox_out_, kMailboxSlot * options.send_queue_depth, 0);
  if (mailbox_out_mr_ == nullptr) return registration_failure();
  if (getrandom(&first_byte_, sizeof first_byte_, 0) != sizeof first_byte_) first_byte_ = 0x5eed;
  // Every receive is posted before the peer can send anything: RNR is impossible from the start.
  for (int i = 0; i < options.recv_queue_depth; ++i) {
    if (Status s = post_receive(); s != Status::kOk) return s;
  }
  if (ibv_req_notify_cq(cq_, 0) != 0) return Status::kResources;
  return Status::kOk;
}

SetupInfo RdmaStream::local_setup() const {
  SetupInfo info{};
  info.magic = kSetupMagic;
  info.version = kProtocolVersion;
  info.ring_size_log2 = static_cast<uint8_t>(options_.ring_size_log2);
  info.rkey = ring_mr_->rkey;
  info.ring_addr = reinterpret_cast<uint64_t>(ring_);
  info.first_byte = first_byte_;
  info.posted = options_.recv_queue_depth;
  info.queue_depth = options_.recv_queue_depth;
  return info;
}

Status RdmaStream::start(const SetupInfo& peer) {
  if (peer.magic != kSetupMagic || peer.version != kProtocolVersion || peer.ring_size_log2 < 10 ||
      peer.ring_size_log2 > 30 || peer.queue_depth == 0 || peer.posted > peer.queue_depth) {
    return Status::kProtocolError;
  }
  peer_ring_size_ = uint64_t{1} << peer.ring_size_log2;
  peer_ring_addr_ = peer.ring_addr;
  peer_rkey_ = peer.rkey;
  bounce_ = allocate(peer_ring_size_);
  if (bounce_ == nullptr) return Status::kResources;
  bounce_mr_ = ibv_reg_mr(id_->pd, bounce_, peer_ring_size_, 0);
  if (bounce_mr_ == nullptr) return registration_failure();
  flow_ = std::make_unique<FlowControl>(FlowConfig{peer_ring_size_, first_byte_, peer.posted, peer.queue_depth,
                                                   ring_size_, peer.first_byte, options_.recv_queue_depth,
                                                   options_.recv_queue_depth});
  return Status::kOk;
}

Status RdmaStream::connect(const sockaddr* address, const StreamOptions& options, std::unique_ptr<RdmaStream>* out) {
  std::unique_ptr<RdmaStream> stream(new RdmaStream);
  stream->cm_channel_ = rdma_create_event_channel();
  if (stream->cm_channel_ == nullptr) return Status::kNoDevice;
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(stream->cm_channel_, &id, nullptr, RDMA_PS_TCP) != 0) return Status::kResources;
  stream->id_ = id;
  if (rdma_resolve_addr(id, nullptr, const_cast<sockaddr*>(address), options.timeout_ms) != 0) return Status::kNoRoute;
  if (Status s = expect_cm_event(stream->cm_channel_, options.timeout_ms, RDMA_CM_EVENT_ADDR_RESOLVED); s != Status::kOk) {
    return s;
  }
  if (rdma_resolve_route(id, options.timeout_ms) != 0) return Status::kNoRoute;
  if (Status s = expect_cm_event(stream->cm_channel_, options.timeout_ms, RDMA_CM_EVENT_ROUTE_RESOLVED); s != Status::kOk) {
    return s;
  }
  if (Status s = stream->create_resources(id, options); s != Status::kOk) return s;
  SetupInfo mine = stream->local_setup();
  rdma_conn_param param{};
  param.private_data = &mine;
  param.private_data_len = sizeof mine;
  param.retry_count = 7;
  param.rnr_retry_count = 0;  // receiver-not-ready must never happen: make it an error, not a retry
  if (rdma_connect(id, &param) != 0) return Status::kReset;
  SetupInfo peer{};
  if (Status s = expect_cm_event(stream->cm_channel_, options.timeout_ms, RDMA_CM_EVENT_ESTABLISHED, &peer);
      s != Status::kOk) {
    return s;
  }
  if (Status s = stream->start(peer); s != Status::kOk) return s;
  *out = std::move(stream);
  return Status::kOk;
}

Status StreamListener::listen(const sockaddr* address, const StreamOptions& options,
                              std::unique_ptr<StreamListener>* out) {
  std::unique_ptr<StreamListener> listener(new StreamListener);
  listener->options_ = options;
  listener->channel_ = rdma_create_event_channel();
  if (listener->channel_ == nullptr) return Status::kNoDevice;
  if (rdma_create_id(listener->channel_, &listener->id_, nullptr, RDMA_PS_TCP) != 0) return Status::kResources;
  if (rdma_bind_addr(listener->id_, const_cast<sockaddr*>(address)) != 0) return Status::kNoDevice;
  if (rdma_listen(listener->id_, 64) != 0) return Status::kResources;
  *out = std::move(listener);
  return Status::kOk;
}

StreamListener::~StreamListener() {
  if (id_ != nullptr) rdma_destroy_id(id_);
  if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
}

Status StreamListener::accept(std::unique_ptr<RdmaStream>* out) {
  rdma_cm_event* event = nullptr;
  if (Status s = next_cm_event(channel_, -1, &event); s != Status::kOk) return s;
  if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    rdma_ack_cm_event(event);
    return Status::kReset;
  }
  rdma_cm_id* id = event->id;
  SetupInfo peer{};
  bool short_data = event->param.conn.private_data_len < sizeof peer;
  if (!short_data) std::memcpy(&peer, event->param.conn.private_data, sizeof peer);
  rdma_ack_cm_event(event);
  if (short_data) {
    rdma_reject(id, nullptr, 0);
    rdma_destroy_id(id);
    return Status::kProtocolError;
  }
  std::unique_ptr<RdmaStream> stream(new RdmaStream);
  stream->cm_channel_ = rdma_create_event_channel();
  // Each stream gets its own event channel, so that its events never reach the listener.
  if (stream->cm_channel_ == nullptr || rdma_migrate_id(id, stream->cm_channel_) != 0) {
    rdma_reject(id, nullptr, 0);
    rdma_destroy_id(id);
    return Status::kResources;
  }
  Status s = stream->create_resources(id, options_);
  if (s == Status::kOk) s = stream->start(peer);
  if (s != Status::kOk) {
    rdma_reject(id, nullptr, 0);
    return s;
  }
  SetupInfo mine = stream->local_setup();
  rdma_conn_param param{};
  param.private_data = &mine;
  param.private_data_len = sizeof mine;
  param.rnr_retry_count = 0;
  if (rdma_accept(id, &param) != 0) return Status::kReset;
  if (s = expect_cm_event(stream->cm_channel_, options_.timeout_ms, RDMA_CM_EVENT_ESTABLISHED); s != Status::kOk) {
    return s;
  }
  *out = std::move(stream);
  return Status::kOk;
}

RdmaStream::~RdmaStream() {
  if (id_ != nullptr && id_->qp != nullptr) rdma_destroy_qp(id_);
  if (ring_mr_ != nullptr) ibv_dereg_mr(ring_mr_);
  if (bounce_mr_ != nullptr) ibv_dereg_mr(bounce_mr_);
  if (mailbox_out_mr_ != nullptr) ibv_dereg_mr(mailbox_out_mr_);
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  if (comp_channel_ != nullptr) ibv_destroy_comp_channel(comp_channel_);
  if (id_ != nullptr) rdma_destroy_id(id_);
  if (cm_channel_ != nullptr) rdma_destroy_event_channel(cm_channel_);
  std::free(ring_);
  std::free(bounce_);
  std::free(mailbox_out_);
}

// ---- data path ---------------------------------------------------------------------------------------

Status RdmaStream::post_receive() {
  ibv_recv_wr wr{}, *bad = nullptr;  // no buffer: every message is an RDMA Write with immediate
  return ibv_post_recv(id_->qp, &wr, &bad) == 0 ? Status::kOk : Status::kResources;
}

Status RdmaStream::post_write(uint64_t local_offset, uint32_t length, uint64_t remote_offset, uint32_t imm,
                              bool with_imm, ibv_mr* local_mr) {
  // The send queue is bounded: wait for completions rather than overflow it.
  while (sends_outstanding_ >= options_.send_queue_depth) {
    if (Status s = wait_for_event(); s != Status::kOk) return s;
  }
  ibv_sge sge{reinterpret_cast<uint64_t>(static_cast<uint8_t*>(local_mr->addr) + local_offset), length,
              local_mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = length > 0 ? &sge : nullptr;
  wr.num_sge = length > 0 ? 1 : 0;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = peer_ring_addr_ + remote_offset;
  wr.wr.rdma.rkey = peer_rkey_;
  if (ibv_post_send(id_->qp, &wr, &bad) != 0) return Status::kReset;
  ++sends_outstanding_;
  return Status::kOk;
}

Status RdmaStream::send_credits() {
  if (flow_->update_due()) {
    MailboxUpdate u = flow_->make_update();
    ++mailbox_seq_;
    uint64_t slot = (mailbox_seq_ % options_.send_queue_depth) * kMailboxSlot;
    uint64_t words[7] = {mailbox_seq_, u.consumed, u.posted, u.armed, u.seen_consumed, u.seen_posted, mailbox_seq_};
    std::memcpy(mailbox_out_ + slot, words, sizeof words);
    if (Status s = post_write(slot, kMailboxSize, peer_ring_size_, 0, false, mailbox_out_mr_); s != Status::kOk) {
      return s;
    }
  }
  if (flow_->may_send_wakeup()) {
    uint64_t answered = flow_->on_wakeup_sent();
    return post_write(0, 0, 0, encode_imm(MessageType::kWakeup, static_cast<uint32_t>(answered)), true, bounce_mr_);
  }
  return Status::kOk;
}

Status RdmaStream::request_wakeup() {
  // Blocked on the peer. Once per wakeup: the new arm count goes out with a mailbox update, then an
  // arm message, whose completion wakes the peer if it sleeps (RC order: the update lands first).
  if (!flow_->may_arm()) return Status::kOk;  // already armed, or receives to repost first
  flow_->arm();
  if (Status s = send_credits(); s != Status::kOk) return s;
  flow_->on_arm_sent();
  return post_write(0, 0, 0, encode_imm(MessageType::kArm, static_cast<uint32_t>(flow_->arm_count())), true,
                    bounce_mr_);
}

bool RdmaStream::read_mailbox(MailboxUpdate* update) {
  // The peer's RDMA Write may land in any order: seq is written at both ends; equal means whole.
  const volatile uint64_t* box = reinterpret_cast<const volatile uint64_t*>(ring_ + ring_size_);
  uint64_t seq_end = box[6];
  std::atomic_thread_fence(std::memory_order_acquire);
  uint64_t words[5] = {box[1], box[2], box[3], box[4], box[5]};
  std::atomic_thread_fence(std::memory_order_acquire);
  uint64_t seq_start = box[0];
  if (seq_start != seq_end || seq_start == last_mailbox_seq_read_) return false;
  last_mailbox_seq_read_ = seq_start;
  *update = {words[0], words[1], words[2], words[3], words[4]};
  return true;
}

Status RdmaStream::handle_completion(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS) {
    failed_ = true;
    return Status::kReset;
  }
  if (!(wc.opcode & IBV_WC_RECV)) {
    --sends_outstanding_;
    return Status::kOk;
  }
  if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) return Status::kProtocolError;
  uint32_t imm = ntohl(wc.imm_data);
  FlowError e = FlowError::kNone;
  switch (imm_type(imm)) {
    case MessageType::kData:
      if (imm_arg(imm) != wc.byte_len) return Status::kProtocolError;
      e = flow_->on_data_arrived(imm_arg(imm));
      break;
    case MessageType::kWakeup:
      e = flow_->on_wakeup_arrived(imm_arg(imm));
      ++wakeups_received_;
      break;
    case MessageType::kArm:
      e = flow_->on_arm_arrived();  // the count itself came with the mailbox update before it
      break;
    case MessageType::kEnd:
      if (imm_arg(imm) != kEndClose) {
        failed_ = true;
        return Status::kReset;
      }
      e = flow_->on_close_arrived();
      break;
  }
  if (e != FlowError::kNone) return Status::kProtocolError;
  if (Status s = post_receive(); s != Status::kOk) return s;
  flow_->on_reposted(1);
  return Status::kOk;
}

Status RdmaStream::progress() {
  if (failed_) return Status::kReset;
  ibv_wc wcs[16];
  int n = 0;
  while ((n = ibv_poll_cq(cq_, 16, wcs)) > 0) {
    for (int i = 0; i < n; ++i) {
      if (Status s = handle_completion(wcs[i]); s != Status::kOk) {
        failed_ = true;
        return s;
      }
    }
  }
  if (n < 0) return Status::kReset;
  MailboxUpdate update{};
  if (read_mailbox(&update) && flow_->on_peer_mailbox(update) != FlowError::kNone) return Status::kProtocolError;
  return send_credits();
}

Status RdmaStream::handle_cm_event() {
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(cm_channel_, &event) != 0) return Status::kOk;  // nothing after all
  rdma_cm_event_type type = event->event;
  rdma_ack_cm_event(event);
  if (type != RDMA_CM_EVENT_DISCONNECTED && type != RDMA_CM_EVENT_DEVICE_REMOVAL) return Status::kOk;
  disconnected_ = true;
  // After the peer's orderly close a disconnect is the normal end; before it, the peer (or its
  // process, or the link) is gone: a reset, never a clean end of stream.
  if (flow_->peer_closed()) return Status::kOk;
  failed_ = true;
  return Status::kReset;
}

Status RdmaStream::wait_for_event() {
  // Arm the completion channel, then look once more: a completion that came in between would
  // otherwise raise no event.
  if (ibv_req_notify_cq(cq_, 0) != 0) return Status::kReset;
  ibv_wc wc;
  int n = ibv_poll_cq(cq_, 1, &wc);
  if (n < 0) return Status::kReset;
  if (n == 1) {
    Status s = handle_completion(wc);
    return s == Status::kOk ? progress() : s;
  }
  // Sleep on both channels: completions, and connection events (a dead peer raises no completion
  // at a side that only waits to read).
  pollfd fds[2] = {{comp_channel_->fd, POLLIN, 0}, {cm_channel_->fd, POLLIN, 0}};
  int nfds = disconnected_ ? 1 : 2;
  if (::poll(fds, static_cast<nfds_t>(nfds), -1) < 0 && errno != EINTR) return Status::kReset;
  if (nfds == 2 && (fds[1].revents & POLLIN)) {
    if (Status s = handle_cm_event(); s != Status::kOk) return s;
  }
  if (fds[0].revents & POLLIN) {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    if (ibv_get_cq_event(comp_channel_, &cq, &context) != 0) return Status::kReset;
    ibv_ack_cq_events(cq, 1);
  }
  return progress();
}

Status RdmaStream::write(const iovec* iov, int iovcnt, size_t* done) {
  *done = 0;
  for (int i = 0; i < iovcnt; ++i) {
    const auto* src = static_cast<const uint8_t*>(iov[i].iov_base);
    size_t left = iov[i].iov_len;
    while (left > 0) {
      if (Status s = progress(); s != Status::kOk) return s;
      uint64_t room = flow_->data_room(left);
      if (room == 0) {
        if (Status s = request_wakeup(); s != Status::kOk) return s;
        if (Status s = wait_for_event(); s != Status::kOk) return s;
        continue;
      }
      uint64_t offset = flow_->peer_ring_offset();
      std::memcpy(bounce_ + offset, src, room);
      Status s = post_write(offset, static_cast<uint32_t>(room), offset,
                            encode_imm(MessageType::kData, static_cast<uint32_t>(room)), true, bounce_mr_);
      if (s != Status::kOk) return s;
      flow_->on_data_sent(room);
      src += room;
      left -= room;
      *done += room;
    }
  }
  return Status::kOk;
}

Status RdmaStream::read(const iovec* iov, int iovcnt, size_t* done) {
  *done = 0;
  for (;;) {
    if (Status s = progress(); s != Status::kOk) return s;
    if (flow_->readable() > 0) break;
    if (flow_->peer_closed()) return Status::kOk;  // end of stream
    if (Status s = wait_for_event(); s != Status::kOk) return s;
  }
  for (int i = 0; i < iovcnt && flow_->readable() > 0; ++i) {
    auto* dst = static_cast<uint8_t*>(iov[i].iov_base);
    size_t want = std::min<uint64_t>(iov[i].iov_len, flow_->readable());
    while (want > 0) {
      uint64_t offset = flow_->our_ring_offset();
      uint64_t chunk = std::min<uint64_t>(want, ring_size_ - offset);  // the ring wraps
      std::memcpy(dst, ring_ + offset, chunk);
      flow_->on_app_consumed(chunk);
      dst += chunk;
      want -= chunk;
      *done += chunk;
    }
  }
  return send_credits();
}

Status RdmaStream::close() {
  while (!flow_->may_send_close()) {
    if (Status s = progress(); s != Status::kOk) return s;
    if (flow_->may_send_close()) break;
    if (Status s = request_wakeup(); s != Status::kOk) return s;
    if (Status s = wait_for_event(); s != Status::kOk) return s;
  }
  if (Status s = post_write(0, 0, 0, encode_imm(MessageType::kEnd, kEndClose), true, bounce_mr_); s != Status::kOk) {
    return s;
  }
  flow_->on_close_sent();
  // Wait (bounded by the peer's own close) for its close; bytes it still sends are dropped.
  while (!flow_->peer_closed()) {
    if (Status s = wait_for_event(); s != Status::kOk) return s;
    flow_->on_app_consumed(flow_->readable());
  }
  while (sends_outstanding_ > 0 && !disconnected_) {
    if (Status s = wait_for_event(); s != Status::kOk) return s;
  }
  rdma_disconnect(id_);
  return Status::kOk;
}

}  // namespace tcp2rdma::transport
