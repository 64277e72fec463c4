// Setup of an RdmaStream: verbs resources, the client's connect, teardown. The listener's half is in
// stream_listener.cpp; both meet in start().
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "os_calls.h"
#include "own_calls.h"
#include "own_descriptors.h"
#include "rdma_stream.h"
#include "setup_events.h"
#include "rdma_address.h"
#include "tuple_address.h"
#include "stream_listener.h"

namespace tcp2rdma::transport {
namespace {

uint8_t* allocate(size_t bytes) {
  void* p = std::aligned_alloc(4096, (bytes + 4095) & ~size_t{4095});
  if (p != nullptr) std::memset(p, 0, bytes);
  return static_cast<uint8_t*>(p);
}


// Address resolution fails the same way for "no device at all" and "no device for this address";
// the first deserves its own status (the caller need not try again later).
Status resolution_failure(Status what) {
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  if (devices != nullptr) ibv_free_device_list(devices);
  return count == 0 ? Status::kNoDevice : what;
}

bool set_nonblocking(int fd) {
  int flags = os().fcntl(fd, F_GETFL);
  return flags >= 0 && os().fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// fd joins the epoll set `set`, readable when fd is.
bool watch(int set, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  return os().epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev) == 0;
}

}  // namespace

bool valid_options(const StreamOptions& o) {
  return o.ring_size_log2 >= 10 && o.ring_size_log2 <= 29 && o.max_peer_ring_size_log2 >= 10 &&
         o.max_peer_ring_size_log2 <= 29 && o.recv_queue_depth >= 4 && o.recv_queue_depth <= 255 &&
         o.send_queue_depth >= o.recv_queue_depth + 8 && o.timeout_ms > 0;
}

bool valid_request(const ConnectRequest& r) {
  return r.magic == kSetupMagic && r.version == kProtocolVersion && r.ring_size_log2 >= 10 && r.ring_size_log2 <= 29 &&
         r.queue_depth >= 4 && (r.tuple.family == AF_INET || r.tuple.family == AF_INET6);
}

bool valid_reply(const AcceptReply& r, uint64_t client_nonce) {
  return r.magic == kSetupMagic && r.version == kProtocolVersion && r.ring_size_log2 >= 10 && r.ring_size_log2 <= 29 &&
         r.queue_depth >= 4 && r.client_nonce == client_nonce;
}

bool valid_redirect(const Redirect& r, uint64_t client_nonce) {
  return r.magic == kSetupMagic && r.version == kProtocolVersion && r.kind == kRedirectKind && r.port != 0 &&
         r.client_nonce == client_nonce;
}

uint64_t random_nonce() {
  uint64_t n = 0;
  while (getrandom(&n, sizeof n, 0) != sizeof n) {
  }
  return n;
}

Status RdmaStream::create_resources(rdma_cm_id* id, const StreamOptions& options) {
  options_ = options;
  id_ = id;
  if (id->verbs == nullptr) return Status::kNoDevice;
  // Without an explicit ack timeout rdma_cm may leave it at 0 (seen with rxe): "never time out", so a
  // crashed peer host would never fail a send, and the keepalive could never notice it.
  uint8_t ack_timeout = options.ack_timeout_log2;
  rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout, sizeof ack_timeout);
  {
    OwnDescriptors window;
    comp_channel_ = ibv_create_comp_channel(id->verbs);
    if (comp_channel_ == nullptr) return Status::kResources;
    if ((comp_channel_->fd = window.place(comp_channel_->fd)) < 0) return Status::kDescriptors;
  }
  int cq_size = options.send_queue_depth + options.recv_queue_depth;
  cq_ = ibv_create_cq(id->verbs, cq_size, nullptr, comp_channel_, 0);
  if (cq_ == nullptr) return Status::kResources;
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = cq_;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = options.send_queue_depth;
  attr.cap.max_recv_wr = options.recv_queue_depth;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = options.inline_threshold;
  // A protection domain of the stream's own, not librdmacm's one per device and process: a queue pair
  // can reach only the memory registered in its domain, so a peer can write into this stream's ring
  // and mailbox and nothing else of this process, whatever rkeys it guesses (rkeys are small and
  // sequential on rxe and mlx5; docs/architecture.md, "Security model").
  pd_ = ibv_alloc_pd(id->verbs);
  if (pd_ == nullptr) return Status::kResources;
  if (rdma_create_qp(id, pd_, &attr) != 0) {
    // Some devices take no inline data at all: small pieces then go through the bounce buffer.
    attr.cap.max_inline_data = 0;
    if (options.inline_threshold == 0 || rdma_create_qp(id, pd_, &attr) != 0) return Status::kResources;
  }
  max_inline_ = attr.cap.max_inline_data;

  ring_size_ = uint64_t{1} << options.ring_size_log2;
  ring_ = allocate(ring_size_ + kMailboxSlot);
  if (ring_ == nullptr) return Status::kResources;
  // Registered at iova 0: the peer addresses our ring by offset, so no address crosses the wire.
  ring_mr_ = ibv_reg_mr_iova(pd_, ring_, ring_size_ + kMailboxSlot, 0,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (ring_mr_ == nullptr) return registration_failure(errno);
  mailbox_out_ = allocate(kMailboxSlot * options.send_queue_depth);
  if (mailbox_out_ == nullptr) return Status::kResources;
  mailbox_out_mr_ = ibv_reg_mr(pd_, mailbox_out_, kMailboxSlot * options.send_queue_depth, 0);
  if (mailbox_out_mr_ == nullptr) return registration_failure(errno);
  // Every receive is posted before the peer can send anything: RNR is impossible from the start.
  for (int i = 0; i < options.recv_queue_depth; ++i) {
    if (Status s = post_receive(); s != Status::kOk) return s;
  }
  if (options.zcopy_threshold > 0) {
    registrations_ = std::make_unique<RegistrationCache>(pd_, options.registration_cache_entries);
  }
  return create_wait_set();
}

Status RdmaStream::create_wait_set() {
  // One set for our sleeps: completions, connection events, and kicks from other threads of ours.
  // The channels are drained without blocking by whoever holds the lock.
  if (!set_nonblocking(comp_channel_->fd)) return Status::kResources;
  // Pollers get a set of their own: our sleeps take the channels' events and the kicks, which must
  // not take away a poller's "look again" (look_fd_), and a pending "look again" must not wake our
  // sleeps.
  {
    OwnDescriptors window;
    kick_fd_ = window.place(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    look_fd_ = window.place(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    epoll_fd_ = window.place(os().epoll_create1(EPOLL_CLOEXEC));
    readiness_fd_ = window.place(os().epoll_create1(EPOLL_CLOEXEC));
  }
  if (kick_fd_ < 0 || look_fd_ < 0 || epoll_fd_ < 0 || readiness_fd_ < 0) return Status::kDescriptors;
  if (!watch(epoll_fd_, comp_channel_->fd) || !watch(epoll_fd_, kick_fd_) ||
      !watch(readiness_fd_, comp_channel_->fd) || !watch(readiness_fd_, look_fd_)) {
    return Status::kResources;
  }
  return Status::kOk;
}

// Called once both sides' parameters are known; the cm channel is this stream's own by now.
Status RdmaStream::start(uint8_t peer_ring_log2, uint32_t peer_rkey, uint8_t peer_depth, bool is_client) {
  if (peer_ring_log2 > options_.max_peer_ring_size_log2) return Status::kRefused;  // before allocating it
  if (!set_nonblocking(cm_channel_->fd)) return Status::kResources;
  if (!watch(epoll_fd_, cm_channel_->fd) || !watch(readiness_fd_, cm_channel_->fd)) return Status::kResources;
  peer_ring_size_ = uint64_t{1} << peer_ring_log2;
  peer_rkey_ = peer_rkey;
  bounce_ = allocate(peer_ring_size_);
  if (bounce_ == nullptr) return Status::kResources;
  bounce_mr_ = ibv_reg_mr(pd_, bounce_, peer_ring_size_, 0);
  if (bounce_mr_ == nullptr) return registration_failure(errno);
  uint64_t ours = stream_cursor_origin(client_nonce_, server_nonce_, is_client);
  uint64_t theirs = stream_cursor_origin(client_nonce_, server_nonce_, !is_client);
  flow_ = std::make_unique<FlowControl>(FlowConfig{peer_ring_size_, ours, peer_depth, peer_depth, ring_size_, theirs,
                                                   options_.recv_queue_depth, options_.recv_queue_depth});
  in_flight_.resize(options_.send_queue_depth);
  acked_ = retained_from_ = ours;
  cq_armed_ = false;
  return Status::kOk;
}

Status RdmaStream::connect(const sockaddr* address, const Pairing& pairing, const StreamOptions& options,
                           std::unique_ptr<RdmaStream>* out) {
  OwnCalls own;  // own_calls.h
  if (!valid_options(options)) return Status::kInvalid;
  if (memlock_holds_no_stream()) return Status::kMemoryLock;
  sockaddr_storage there = rdma_address(address);  // an IPv4-mapped address as the IPv4 one it is
  if (there.ss_family != AF_INET && there.ss_family != AF_INET6) return Status::kInvalid;
  uint16_t redirect_port = 0;
  Status s = connect_once(reinterpret_cast<const sockaddr*>(&there), pairing, options, out, &redirect_port);
  if (redirect_port == 0) return s;
  // Sent on by a pre-fork server's directory (docs/protocol.md, "Redirect"): once, never further.
  if (there.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&there)->sin6_port = htons(redirect_port);
  } else {
    reinterpret_cast<sockaddr_in*>(&there)->sin_port = htons(redirect_port);
  }
  s = connect_once(reinterpret_cast<const sockaddr*>(&there), pairing, options, out, &redirect_port);
  return redirect_port == 0 ? s : Status::kRejected;
}

Status RdmaStream::connect_once(const sockaddr* address, const Pairing& pairing, const StreamOptions& options,
                                std::unique_ptr<RdmaStream>* out, uint16_t* redirect_port) {
  *redirect_port = 0;
  std::unique_ptr<RdmaStream> stream(new RdmaStream);
  stream->tuple_ = pairing.tuple;
  stream->client_nonce_ = pairing.client_nonce;
  {
    OwnDescriptors window;
    stream->cm_channel_ = rdma_create_event_channel();
    if (stream->cm_channel_ == nullptr) return Status::kNoDevice;
    if ((stream->cm_channel_->fd = window.place(stream->cm_channel_->fd)) < 0) return Status::kDescriptors;
  }
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(stream->cm_channel_, &id, nullptr, RDMA_PS_TCP) != 0) return Status::kResources;
  stream->id_ = id;
  if (rdma_resolve_addr(id, nullptr, const_cast<sockaddr*>(address), options.timeout_ms) != 0) {
    return resolution_failure(Status::kNoRoute);
  }
  if (Status s = expect_cm_event(stream->cm_channel_, options.timeout_ms, RDMA_CM_EVENT_ADDR_RESOLVED); s != Status::kOk) {
    return resolution_failure(s);
  }
  // A tuple without a client address (tests and tools, which pair no TCP connection) gets the one the
  // request will come from: the listener checks it (tuple_matches).
  if (std::all_of(std::begin(stream->tuple_.client_addr), std::end(stream->tuple_.client_addr),
                  [](uint8_t b) { return b == 0; })) {
    tuple_address(rdma_get_local_addr(id), stream->tuple_.client_addr);
  }
  if (rdma_resolve_route(id, options.timeout_ms) != 0) return Status::kNoRoute;
  if (Status s = expect_cm_event(stream->cm_channel_, options.timeout_ms, RDMA_CM_EVENT_ROUTE_RESOLVED); s != Status::kOk) {
    return s;
  }
  if (Status s = stream->create_resources(id, options); s != Status::kOk) return s;
  ConnectRequest request{};
  stream->describe_ourselves(&request, options);
  request.tuple = stream->tuple_;
  request.client_nonce = pairing.client_nonce;
  rdma_conn_param param{};
  param.private_data = &request;
  param.private_data_len = sizeof request;
  param.retry_count = kRetryCount;
  param.rnr_retry_count = 0;  // receiver-not-ready must never happen: make it an error, not a retry
  if (rdma_connect(id, &param) != 0) return Status::kReset;
  AcceptReply reply{};
  Redirect redirect{};
  if (Status s = expect_established(stream->cm_channel_, options.timeout_ms, &reply, &redirect); s != Status::kOk) {
    if (s == Status::kRejected && valid_redirect(redirect, pairing.client_nonce)) *redirect_port = redirect.port;
    return s;
  }
  if (!valid_reply(reply, pairing.client_nonce)) return Status::kProtocolError;
  stream->server_nonce_ = reply.server_nonce;
  if (Status s = stream->start(reply.ring_size_log2, reply.rkey, reply.queue_depth, true); s != Status::kOk) return s;
  *out = std::move(stream);
  return Status::kOk;
}

RdmaStream::~RdmaStream() {
  OwnCalls own;  // own_calls.h
  if (id_ != nullptr && id_->qp != nullptr) rdma_destroy_qp(id_);
  registrations_.reset();
  if (ring_mr_ != nullptr) ibv_dereg_mr(ring_mr_);
  if (bounce_mr_ != nullptr) ibv_dereg_mr(bounce_mr_);
  if (mailbox_out_mr_ != nullptr) ibv_dereg_mr(mailbox_out_mr_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);  // after its queue pair and every registration in it
  if (cq_ != nullptr) ibv_destroy_cq(cq_);  // every event taken from the channel was acknowledged at once
  if (comp_channel_ != nullptr) ibv_destroy_comp_channel(comp_channel_);
  if (id_ != nullptr) rdma_destroy_id(id_);
  if (cm_channel_ != nullptr) rdma_destroy_event_channel(cm_channel_);
  for (int fd : {epoll_fd_, kick_fd_, readiness_fd_, look_fd_}) {
    if (fd >= 0) os().close(fd);
  }
  std::free(ring_);
  std::free(bounce_);
  std::free(mailbox_out_);
}

}  // namespace tcp2rdma::transport
