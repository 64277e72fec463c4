#include "stream_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "own_calls.h"
#include "own_descriptors.h"
#include "setup_events.h"

namespace tcp2rdma::transport {

Status StreamListener::listen(const sockaddr* address, const StreamOptions& options,
                              std::unique_ptr<StreamListener>* out) {
  OwnCalls own;  // own_calls.h
  if (!valid_options(options)) return Status::kInvalid;
  if (memlock_holds_no_stream()) return Status::kMemoryLock;
  std::unique_ptr<StreamListener> listener(new StreamListener);
  listener->options_ = options;
  {
    OwnDescriptors window;
    listener->channel_ = rdma_create_event_channel();
    if (listener->channel_ == nullptr) return Status::kNoDevice;
    if ((listener->channel_->fd = window.place(listener->channel_->fd)) < 0) return Status::kDescriptors;
  }
  int flags = ::fcntl(listener->channel_->fd, F_GETFL);
  if (flags < 0 || ::fcntl(listener->channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) return Status::kResources;
  if (rdma_create_id(listener->channel_, &listener->id_, nullptr, RDMA_PS_TCP) != 0) return Status::kResources;
  if (rdma_bind_addr(listener->id_, const_cast<sockaddr*>(address)) != 0) {
    return errno == EADDRINUSE ? Status::kAddressInUse : Status::kNoDevice;
  }
  if (rdma_listen(listener->id_, 64) != 0) return Status::kResources;
  *out = std::move(listener);
  return Status::kOk;
}

StreamListener::~StreamListener() {
  OwnCalls own;  // own_calls.h
  for (Held& h : held_) reject(h.id);
  if (id_ != nullptr) rdma_destroy_id(id_);
  if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
}

void StreamListener::reject(rdma_cm_id* id) {
  rdma_reject(id, nullptr, 0);
  rdma_destroy_id(id);
}

void StreamListener::remove_held(size_t index) {
  held_[index] = held_.back();
  held_.pop_back();
}

uint16_t StreamListener::port() const { return ntohs(rdma_get_src_port(id_)); }

std::vector<StreamListener::Redirected> StreamListener::redirect(
    const std::function<uint16_t(const TcpTuple&)>& port_for) {
  OwnCalls own;  // own_calls.h
  std::vector<Redirected> sent;
  for (size_t i = 0; i < held_.size();) {
    uint16_t port = port_for(held_[i].request.tuple);
    if (port == 0) {
      ++i;
      continue;
    }
    Redirect r{};
    r.magic = kSetupMagic;
    r.version = kProtocolVersion;
    r.kind = kRedirectKind;
    r.port = port;
    r.client_nonce = held_[i].request.client_nonce;
    rdma_reject(held_[i].id, &r, sizeof r);
    rdma_destroy_id(held_[i].id);
    sent.push_back(Redirected{held_[i].request.tuple, port});
    ++counters_.redirected;
    remove_held(i);
  }
  return sent;
}

void StreamListener::take_event(rdma_cm_event* event) {
  rdma_cm_id* id = event->id;
  if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    // Only held requests have ids of their own here; any event for one (the client gave up) ends it.
    rdma_ack_cm_event(event);
    for (size_t i = 0; i < held_.size(); ++i) {
      if (held_[i].id == id) {
        rdma_destroy_id(id);
        remove_held(i);
        break;
      }
    }
    return;
  }
  ++counters_.requests;
  ConnectRequest request{};
  bool whole = event->param.conn.private_data_len >= sizeof request;
  if (whole) std::memcpy(&request, event->param.conn.private_data, sizeof request);
  rdma_ack_cm_event(event);
  if (!whole || !valid_request(request)) {
    ++counters_.rejected_malformed;
    reject(id);
    return;
  }
  held_.push_back(Held{id, request, std::chrono::steady_clock::now()});
}

void StreamListener::collect(std::chrono::milliseconds hold) {
  OwnCalls own;  // own_calls.h
  rdma_cm_event* event = nullptr;
  while (rdma_get_cm_event(channel_, &event) == 0) take_event(event);
  auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < held_.size();) {
    if (now - held_[i].since > hold) {
      ++counters_.rejected_expired;
      reject(held_[i].id);
      remove_held(i);
    } else {
      ++i;
    }
  }
}

Status StreamListener::accept(const TcpTuple& tuple, uint64_t server_nonce, std::unique_ptr<RdmaStream>* out) {
  return accept(tuple, server_nonce, options_, out);
}

Status StreamListener::accept(const TcpTuple& tuple, uint64_t server_nonce, const StreamOptions& options,
                              std::unique_ptr<RdmaStream>* out) {
  OwnCalls own;  // own_calls.h
  if (!valid_options(options)) return Status::kInvalid;
  for (size_t i = 0; i < held_.size(); ++i) {
    if (std::memcmp(&held_[i].request.tuple, &tuple, sizeof tuple) == 0) {
      return accept_held(i, server_nonce, options, out);
    }
  }
  return Status::kWouldBlock;
}

Status StreamListener::accept_any(std::chrono::milliseconds timeout, std::unique_ptr<RdmaStream>* out) {
  OwnCalls own;  // own_calls.h
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (held_.empty()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Status::kTimeout;
    pollfd p{channel_->fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
    collect(timeout);
  }
  return accept_held(0, random_nonce(), options_, out);
}

Status StreamListener::accept_held(size_t index, uint64_t server_nonce, const StreamOptions& options,
                                   std::unique_ptr<RdmaStream>* out) {
  OwnCalls own;  // own_calls.h
  Held held = held_[index];
  remove_held(index);
  std::unique_ptr<RdmaStream> stream(new RdmaStream);
  stream->tuple_ = held.request.tuple;
  stream->client_nonce_ = held.request.client_nonce;
  stream->server_nonce_ = server_nonce;
  Status made = Status::kOk;
  {
    OwnDescriptors window;
    stream->cm_channel_ = rdma_create_event_channel();
    if (stream->cm_channel_ == nullptr) {
      made = Status::kResources;
    } else if ((stream->cm_channel_->fd = window.place(stream->cm_channel_->fd)) < 0) {
      made = Status::kDescriptors;
    }
  }
  if (made != Status::kOk) {
    reject(held.id);
    return made;
  }
  // Each stream gets its own event channel, so that its events never reach the listener. This fails
  // when the client has given up on the request meanwhile.
  if (rdma_migrate_id(held.id, stream->cm_channel_) != 0) {
    reject(held.id);
    return Status::kReset;
  }
  Status s = stream->create_resources(held.id, options);
  if (s == Status::kOk) s = stream->start(held.request.ring_size_log2, held.request.rkey, held.request.queue_depth, false);
  if (s != Status::kOk) {
    rdma_reject(held.id, nullptr, 0);  // the stream's destructor destroys the id
    return s;
  }
  AcceptReply reply{};
  stream->describe_ourselves(&reply, options);
  reply.client_nonce = held.request.client_nonce;
  reply.server_nonce = server_nonce;
  rdma_conn_param param{};
  param.private_data = &reply;
  param.private_data_len = sizeof reply;
  param.retry_count = RdmaStream::kRetryCount;
  param.rnr_retry_count = 0;
  if (rdma_accept(held.id, &param) != 0) return Status::kReset;
  // The cm channel was made non-blocking by start(); wait on it with poll.
  if (s = expect_cm_event(stream->cm_channel_, options.timeout_ms, RDMA_CM_EVENT_ESTABLISHED); s != Status::kOk) {
    return s;
  }
  ++counters_.accepted;
  *out = std::move(stream);
  return Status::kOk;
}

}  // namespace tcp2rdma::transport
