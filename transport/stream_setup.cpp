// Setup of an RdmaStream: verbs resources, the client's connect, teardown. The listener's half is in
// stream_listener.cpp; both meet in start().
#include <arpa/inet.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "link_table.h"
#include "own_calls.h"
#include "page_memory.h"
#include "pin_budget.h"
#include "rdma_stream.h"
#include "setup_events.h"
#include "rdma_address.h"
#include "tuple_address.h"
#include "stream_listener.h"

namespace tcp2rdma::transport {
namespace {

// Address resolution fails the same way for "no device at all" and "no device for this address";
// the first deserves its own status (the caller need not try again later).
Status resolution_failure(Status what) {
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  if (devices != nullptr) ibv_free_device_list(devices);
  return count == 0 ? Status::kNoDevice : what;
}

}  // namespace

bool valid_options(const StreamOptions& o) {
  return o.ring_size_log2 >= 10 && o.ring_size_log2 <= 29 &&
         (o.start_ring_size_log2 == 0 || (o.start_ring_size_log2 >= 10 && o.start_ring_size_log2 <= 29)) &&
         o.max_peer_ring_size_log2 >= 10 &&
         o.max_peer_ring_size_log2 <= 29 && o.recv_queue_depth >= 4 && o.recv_queue_depth <= 255 &&
         o.send_queue_depth >= o.recv_queue_depth + 8 && o.link_channels >= 1 && o.timeout_ms > 0;
}

bool valid_request(const ConnectRequest& r) {
  return r.magic == kSetupMagic && r.version == kProtocolVersion && r.ring_size_log2 >= 10 && r.ring_size_log2 <= 29 &&
         r.queue_depth >= 4 && (r.tuple.family == AF_INET || r.tuple.family == AF_INET6) &&
         (r.max_server_ring_log2 == 0 || (r.max_server_ring_log2 >= 10 && r.max_server_ring_log2 <= 29));
}

bool valid_reply(const AcceptReply& r, uint64_t client_nonce) {
  return r.magic == kSetupMagic && r.version == kProtocolVersion && r.ring_size_log2 >= 10 && r.ring_size_log2 <= 29 &&
         r.queue_depth >= 4 && r.client_nonce == client_nonce;
}

bool valid_redirect(const Redirect& r, uint64_t client_nonce) {
  return r.magic == kSetupMagic && r.version == kProtocolVersion && r.kind == kRedirectKind && r.port != 0 &&
         r.client_nonce == client_nonce;
}

DeclineReason decline_reason(const Redirect& rejection, uint64_t client_nonce) {
  Decline d{};
  std::memcpy(&d, &rejection, sizeof d);  // the same 16 bytes, read as the kind says
  if (d.magic != kSetupMagic || d.version != kProtocolVersion || d.kind != kDeclineKind || d.client_nonce != client_nonce) {
    return DeclineReason::kNone;
  }
  // A reason this side does not know (a newer server's) is still the server's no.
  if (d.reason == 0 || d.reason > kLastDeclineReason) return DeclineReason::kServerStaysTcp;
  return static_cast<DeclineReason>(d.reason);
}

uint64_t random_nonce() {
  uint64_t n = 0;
  while (getrandom(&n, sizeof n, 0) != sizeof n) {
  }
  return n;
}

Status RdmaStream::create_resources(rdma_cm_id* id, const StreamOptions& options) {
  options_ = options;
  link_->adopt_id(id);
  if (Status s = link_->create(options); s != Status::kOk) return s;
  link_->note_busy_poll(options.busy_poll_us, options.busy_poll_adaptive, options.busy_poll_yield);
  return create_channel_memory(true);
}

Status RdmaStream::create_channel_memory(bool first) {
  ring_size_ = uint64_t{1} << first_ring_log2(options_);
  // A link's first channel carries the link's setup area after its mailbox (wire.h, kSetupArea).
  uint64_t length = ring_size_ + kMailboxSlot + (first ? kSetupArea : 0);
  if (StreamLink::Region spare = link_->take_spare(length, true); spare.mr != nullptr) {
    ring_ = spare.memory;
    ring_mr_ = spare.mr;
    ++regions_from_pool_;
    return Status::kOk;
  }
  ring_ = allocate_pages(length);
  if (ring_ == nullptr) return Status::kResources;
  // Registered at iova 0: the peer addresses our ring by offset, so no address crosses the wire.
  ring_mr_ = ibv_reg_mr_iova(link_->pd(), ring_, length, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (ring_mr_ == nullptr) return registration_failure(errno);
  return Status::kOk;
}

// Called once both sides' parameters are known; the cm channel is this stream's own by now.
Status RdmaStream::start(uint8_t peer_ring_log2, uint32_t peer_rkey, uint8_t peer_depth, bool is_client) {
  if (peer_ring_log2 > options_.max_peer_ring_size_log2) return Status::kRefused;  // before allocating it
  if (!link_->cm_watched()) {
    // The link's first channel: its connection events are the link's own from here on, and the
    // setup areas follow each side's first ring and mailbox.
    if (Status s = link_->watch_cm_channel(); s != Status::kOk) return s;
    link_->set_setup_areas(ring_, ring_ + ring_size_ + kMailboxSlot, peer_rkey,
                           (uint64_t{1} << peer_ring_log2) + kMailboxSlot);
  }
  peer_ring_size_ = uint64_t{1} << peer_ring_log2;
  peer_rkey_ = peer_mailbox_rkey_ = peer_rkey;
  if (StreamLink::Region spare = link_->take_spare(peer_ring_size_, false); spare.mr != nullptr) {
    bounce_ = spare.memory;
    bounce_mr_ = spare.mr;
    ++regions_from_pool_;
  } else {
    bounce_ = allocate_pages(peer_ring_size_);
    if (bounce_ == nullptr) return Status::kResources;
    bounce_mr_ = ibv_reg_mr(link_->pd(), bounce_, peer_ring_size_, 0);
    if (bounce_mr_ == nullptr) return registration_failure(errno);
  }
  uint64_t ours = stream_cursor_origin(client_nonce_, server_nonce_, is_client);
  uint64_t theirs = stream_cursor_origin(client_nonce_, server_nonce_, !is_client);
  flow_ = std::make_unique<FlowControl>(FlowConfig{peer_ring_size_, ours, peer_depth, peer_depth, ring_size_, theirs,
                                                   options_.recv_queue_depth, options_.recv_queue_depth});
  ledger_.start(ours, options_.send_queue_depth);
  // A ring that starts small may grow from the first byte (stream_rings.cpp): the first time the peer
  // fills it. Not later (after some bytes of bulk, say): a peer that writes while our application
  // writes too, without reading, fills the ring once and then can write no more, and only a larger
  // ring lets both go on, as kernel TCP's buffers do (integration.pin_limit_root.pair with 1 MiB
  // echoes, which send all before reading, stalled with growth held back to four rings' worth).
  rings_.start(theirs);
  return Status::kOk;
}

Status RdmaStream::connect(const sockaddr* address, const Pairing& pairing, const StreamOptions& options,
                           std::unique_ptr<RdmaStream>* out, DeclineReason* declined) {
  DeclineReason ignored = DeclineReason::kNone;
  if (declined == nullptr) declined = &ignored;
  *declined = DeclineReason::kNone;
  OwnCalls own;  // own_calls.h
  if (!valid_options(options)) return Status::kInvalid;
  if (memlock_holds_no_stream()) return Status::kMemoryLock;
  sockaddr_storage there = rdma_address(address);  // an IPv4-mapped address as the IPv4 one it is
  if (there.ss_family != AF_INET && there.ss_family != AF_INET6) return Status::kInvalid;
  uint16_t redirect_port = 0;
  Status s = connect_once(reinterpret_cast<const sockaddr*>(&there), pairing, options, out, &redirect_port, declined);
  if (redirect_port == 0) return s;
  // Sent on by a pre-fork server's directory (docs/protocol.md, "Redirect"): once, never further.
  if (there.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&there)->sin6_port = htons(redirect_port);
  } else {
    reinterpret_cast<sockaddr_in*>(&there)->sin_port = htons(redirect_port);
  }
  s = connect_once(reinterpret_cast<const sockaddr*>(&there), pairing, options, out, &redirect_port, declined);
  return redirect_port == 0 ? s : Status::kRejected;
}

bool RdmaStream::linked_to(const sockaddr* address) {
  sockaddr_storage there = rdma_address(address);  // as connect() looks the link up
  if (there.ss_family != AF_INET && there.ss_family != AF_INET6) return false;
  return transport::linked_to(reinterpret_cast<const sockaddr*>(&there));
}

Status RdmaStream::connect_once(const sockaddr* address, const Pairing& pairing, const StreamOptions& options,
                                std::unique_ptr<RdmaStream>* out, uint16_t* redirect_port,
                                DeclineReason* declined) {
  *redirect_port = 0;
  // Our ring as the pinning limit allows (pin_budget.h), decided before rdma_cm is touched; the server
  // is asked to keep its own ring, which our bounce buffer mirrors, to what we can pin too.
  // A ring that starts small is sized so at the start, and grows later as the budget then allows;
  // the server is then asked to start no larger than we do: its ring grows by offers too, each of
  // which we take only if we can pin its mirror then (answer_ring_offer), so that the setup reserves
  // first rings alone and the rule's sizes stay the bound of growth.
  bool grows = ring_grows(options);
  uint32_t server_start_log2 = grows ? std::min(first_ring_log2(options), options.max_peer_ring_size_log2)
                                     : options.max_peer_ring_size_log2;
  PinReservation pin = PinReservation::for_client(first_ring_log2(options), server_start_log2,
                                                  stream_fixed_pin(options.send_queue_depth), grows);
  if (pin.choice().ring_log2 == 0) return Status::kPinLimit;
  StreamOptions sized = options;
  set_first_ring(&sized, pin.choice().ring_log2);
  uint32_t server_ring_log2 = pin.choice().max_peer_log2;
  if (!grows) sized.max_peer_ring_size_log2 = server_ring_log2;
  // A live link to this server address takes the stream as a channel: one round trip, no rdma_cm
  // (docs/links.md). A link that cannot (full, failed meanwhile) leaves it to a queue pair of its own.
  // Another thread's link to the same server is waited for a quarter of the setup timeout at most:
  // its first stream's request may be held until the server's application accepts that stream's TCP
  // connection, which this stream's own connection must not wait out (the server may be accepting
  // this one first, and waiting for its request).
  bool making = false;
  if (std::shared_ptr<StreamLink> link = find_link(address, sized.recv_queue_depth,
                                                   std::chrono::milliseconds(options.timeout_ms / 4), &making)) {
    Pairing paired = pairing;
    if (std::all_of(std::begin(paired.tuple.client_addr), std::end(paired.tuple.client_addr),
                    [](uint8_t b) { return b == 0; })) {
      tuple_address(rdma_get_local_addr(link->id()), paired.tuple.client_addr);
    }
    Status s = open_on_link(link, paired, sized, server_ring_log2, out, redirect_port, declined);
    if (s != Status::kResources && s != Status::kReset) return s;
  }
  // Whatever becomes of this link, the streams that wait for it learn so when this returns.
  struct Made {
    const sockaddr* address;
    bool making;
    ~Made() {
      if (making) link_made(address);
    }
  } made{address, making};
  std::unique_ptr<RdmaStream> stream(new RdmaStream);
  stream->tuple_ = pairing.tuple;
  stream->client_nonce_ = pairing.client_nonce;
  if (Status s = stream->link_->open_cm_channel(); s != Status::kOk) return s;
  rdma_event_channel* channel = stream->link_->cm_channel();
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) != 0) return Status::kResources;
  stream->link_->adopt_id(id);
  if (rdma_resolve_addr(id, nullptr, const_cast<sockaddr*>(address), options.timeout_ms) != 0) {
    return resolution_failure(Status::kNoRoute);
  }
  if (Status s = expect_cm_event(channel, options.timeout_ms, RDMA_CM_EVENT_ADDR_RESOLVED); s != Status::kOk) {
    return resolution_failure(s);
  }
  // A tuple without a client address (tests and tools, which pair no TCP connection) gets the one the
  // request will come from: the listener checks it (tuple_matches).
  if (std::all_of(std::begin(stream->tuple_.client_addr), std::end(stream->tuple_.client_addr),
                  [](uint8_t b) { return b == 0; })) {
    tuple_address(rdma_get_local_addr(id), stream->tuple_.client_addr);
  }
  if (rdma_resolve_route(id, options.timeout_ms) != 0) return Status::kNoRoute;
  if (Status s = expect_cm_event(channel, options.timeout_ms, RDMA_CM_EVENT_ROUTE_RESOLVED); s != Status::kOk) {
    return s;
  }
  if (int full = crowded_to(address, sized.recv_queue_depth); full > 0) stream->link_->size_for_crowd(full);
  if (Status s = stream->create_resources(id, sized); s != Status::kOk) return s;
  // Our ring and mailbox slots are registered (VmPin has them); the bounce buffer, as large as the
  // server's ring at most, comes after its reply.
  pin.shrink_to(uint64_t{1} << server_ring_log2);
  ConnectRequest request{};
  stream->describe_ourselves(&request, sized);
  request.max_server_ring_log2 = static_cast<uint8_t>(server_ring_log2);
  request.tuple = stream->tuple_;
  request.client_nonce = pairing.client_nonce;
  rdma_conn_param param{};
  param.private_data = &request;
  param.private_data_len = sizeof request;
  param.retry_count = kRetryCount;
  param.rnr_retry_count = 0;  // receiver-not-ready must never happen: make it an error, not a retry
  param.qp_num = stream->link_->qp_num();
  if (rdma_connect(id, &param) != 0) return Status::kReset;
  AcceptReply reply{};
  Redirect redirect{};
  if (Status s = expect_response(channel, options.timeout_ms, &reply, &redirect); s != Status::kOk) {
    if (s == Status::kRejected && valid_redirect(redirect, pairing.client_nonce)) *redirect_port = redirect.port;
    if (s == Status::kRejected) *declined = decline_reason(redirect, pairing.client_nonce);
    return s;
  }
  if (!valid_reply(reply, pairing.client_nonce)) return Status::kProtocolError;
  if (Status s = stream->link_->ready_to_send(); s != Status::kOk) return s;
  if (rdma_establish(id) != 0) return Status::kReset;
  stream->link_->mark_established();
  stream->server_nonce_ = reply.server_nonce;
  if (Status s = stream->start(reply.ring_size_log2, reply.rkey, reply.queue_depth, true); s != Status::kOk) return s;
  remember_link(address, stream->link_);
  *out = std::move(stream);
  return Status::kOk;
}

RdmaStream::~RdmaStream() {
  OwnCalls own;  // own_calls.h
  std::unique_lock lock(mu_);  // other channels' threads may be running the link
  // A late answer finds no stream (and ends its channel). Also after the link failed before the
  // answer (the open is then failed, not waiting): an answer already in the completion queue may
  // still be taken.
  if (open_slot_ >= 0) link_->setup().forget_stream(static_cast<uint32_t>(open_slot_), this);
  if (link_.use_count() > 1 && index_ != kLinkChannel && flow_ && !flow_->release_sent() && !link_->stopped()) {
    // Destroyed without close() or abort() (or before their release could go): to the peer this is
    // what a vanished queue pair was, a reset, never a clean end. An abort if a credit allows (after a
    // move to TCP nothing is owed: the connection's fate is TCP's), then our release.
    if (!disconnected_ && !move_sent_ && !failed() && flow_->credits() >= 1 && send_queue_has_room(2)) {
      post_write(nullptr, 0, 0, 0, imm(MessageType::kEnd, kEndAbort), true, 0, kWrSignal);
    }
    send_release();
  }
  if (link_.use_count() > 1 && index_ != kLinkChannel) {
    // The link goes on (other channels, opens under way, or the link table or listener keeping it for
    // the next stream): the peer may still write into our ring, and the adapter read
    // our bounce buffer, until its release arrives and our sends complete (links.md, "Ending a
    // channel"); the link keeps them until then.
    StreamLink::Retired left = leftovers();
    left.receives = receive_quota();
    left.peer_released = flow_ ? flow_->peer_released() : open_state_ == OpenState::kRefused;
    link_->retire(index_, left);
    lock.unlock();
    return;
  }
  StreamLink::Retired nothing;
  nothing.peer_released = true;
  link_->retire(index_, nothing);  // the link goes with this channel, and the memory below
  lock.unlock();
  // The last channel: the queue pair first, since no work request may touch our ring or bounce
  // buffer once deregistered.
  link_->destroy_queue_pair();
  StreamLink::Retired mine = leftovers();
  StreamLink::release(mine);
  link_.reset();  // its protection domain after every registration in it
}

}  // namespace tcp2rdma::transport
