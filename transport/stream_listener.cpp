#include "stream_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "channel_readiness.h"
#include "os_calls.h"
#include "own_calls.h"
#include "own_descriptors.h"
#include "pin_budget.h"
#include "rdma_address.h"
#include "tuple_address.h"
#include "setup_events.h"

namespace tcp2rdma::transport {
namespace {

// What a rejection tells the request's client of why the server declined (wire.h).
Decline decline_record(const ConnectRequest& request, DeclineReason why) {
  Decline d{};
  d.magic = kSetupMagic;
  d.version = kProtocolVersion;
  d.kind = kDeclineKind;
  d.reason = static_cast<uint8_t>(why);
  d.client_nonce = request.client_nonce;
  return d;
}

bool same_address(const uint8_t tuple_addr[16], uint8_t family, const sockaddr* real) {
  uint8_t bytes[16];
  return tuple_address(real, bytes) == family && std::memcmp(bytes, tuple_addr, 16) == 0;
}

}  // namespace

bool tuple_matches(const TcpTuple& tuple, const sockaddr* source, const sockaddr* destination) {
  return same_address(tuple.client_addr, tuple.family, source) &&
         same_address(tuple.server_addr, tuple.family, destination);
}

Status StreamListener::listen(const sockaddr* address, const StreamOptions& options,
                              std::unique_ptr<StreamListener>* out, bool ipv6_only) {
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
    // The wake set (fd()); without it (no descriptors to spare) the cm channel is what is polled, and
    // opens on links are seen at the engine's next timed look.
    int set = window.place(os().epoll_create1(EPOLL_CLOEXEC));
    int bell = set >= 0 ? window.place(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) : -1;
    if (bell >= 0 && watch_readable(set, listener->channel_->fd) && watch_readable(set, bell)) {
      listener->wake_set_ = set;
      listener->opens_bell_ = bell;
    } else {
      if (bell >= 0) os().close(bell);
      if (set >= 0) os().close(set);
    }
  }
  int flags = os().fcntl(listener->channel_->fd, F_GETFL);
  if (flags < 0 || os().fcntl(listener->channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) return Status::kResources;
  if (rdma_create_id(listener->channel_, &listener->id_, nullptr, RDMA_PS_TCP) != 0) return Status::kResources;
  sockaddr_storage bind_to = rdma_address(address);  // an IPv4-mapped address as the IPv4 one it is
  if (bind_to.ss_family == AF_INET6) {
    // Set, not left to the host's net.ipv6.bindv6only: the application's socket decided it.
    int only = ipv6_only ? 1 : 0;
    if (rdma_set_option(listener->id_, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &only, sizeof only) != 0) {
      return Status::kResources;
    }
  }
  if (rdma_bind_addr(listener->id_, reinterpret_cast<sockaddr*>(&bind_to)) != 0) {
    // rdma_cm says a taken port two ways: EADDRINUSE when another listener has this very address,
    // EADDRNOTAVAIL when one on another address of the family overlaps it (a wildcard and a specific
    // address, IPv4 and a dual-stack [::]); EADDRNOTAVAIL also means an address that is not local,
    // which an application's bound socket never has. No RDMA device for the address is ENODEV.
    return errno == EADDRINUSE || errno == EADDRNOTAVAIL ? Status::kAddressInUse : Status::kNoDevice;
  }
  if (rdma_listen(listener->id_, 64) != 0) return Status::kResources;
  *out = std::move(listener);
  return Status::kOk;
}

StreamListener::~StreamListener() {
  OwnCalls own;  // own_calls.h
  for (Held& h : held_) {
    if (h.link != nullptr) {
      say_no(h, DeclineReason::kServerStaysTcp);
    } else {
      reject(h.id);
    }
  }
  for (const std::shared_ptr<StreamLink>& link : links_) drop_link(*link);
  if (id_ != nullptr) rdma_destroy_id(id_);
  if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
  if (opens_bell_ >= 0) os().close(opens_bell_);
  if (wake_set_ >= 0) os().close(wake_set_);
}

void StreamListener::serve_link(const std::shared_ptr<StreamLink>& link) {
  std::lock_guard lock(link->mu());
  link->setup().serve_opens();
  if (wake_set_ < 0) return;
  // A completion on the link wakes the set once the queue is armed (take_link_opens arms it); an
  // open another thread took off the link rings the bell.
  link->setup().set_bell(opens_bell_, &bell_rung_, wake_set_, link->completion_fd(), &set_counts_);
}

void StreamListener::drop_link(StreamLink& link) {
  std::lock_guard lock(link.mu());
  link.setup().forget_listener();
}

void StreamListener::reject(rdma_cm_id* id) {
  rdma_reject(id, nullptr, 0);
  rdma_destroy_id(id);
}

void StreamListener::reject(rdma_cm_id* id, const ConnectRequest& request, DeclineReason why) {
  Decline d = decline_record(request, why);
  rdma_reject(id, &d, sizeof d);
  rdma_destroy_id(id);
}

void StreamListener::say_no(const Held& held, DeclineReason why, uint16_t redirect_port) {
  if (held.link == nullptr) {
    if (redirect_port != 0) {
      Redirect r{};
      r.magic = kSetupMagic;
      r.version = kProtocolVersion;
      r.kind = kRedirectKind;
      r.port = redirect_port;
      r.client_nonce = held.request.client_nonce;
      rdma_reject(held.id, &r, sizeof r);
      rdma_destroy_id(held.id);
    } else {
      reject(held.id, held.request, why);
    }
    return;
  }
  ChannelAnswer answer{};
  answer.magic = kSetupMagic;
  answer.version = kProtocolVersion;
  answer.kind = kRefuseKind;
  answer.reason = static_cast<uint8_t>(why);
  answer.redirect_port = redirect_port;
  answer.client_channel = held.open.client_channel;
  answer.client_nonce = held.open.client_nonce;
  std::lock_guard lock(held.link->mu());
  LinkProgress::post_record(*held.link, &answer, kLinkAnswer, held.slot);
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
    say_no(held_[i], DeclineReason::kServerStaysTcp, port);
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
  // The tuple names the TCP connection the request claims; rdma_cm tells where it really comes from
  // and where it arrived. A host can claim only its own connections to this address.
  if (!tuple_matches(request.tuple, rdma_get_peer_addr(id), rdma_get_local_addr(id))) {
    ++counters_.rejected_forged;
    reject(id);
    return;
  }
  admit(Held{id, request, std::chrono::steady_clock::now()});
}

void StreamListener::take_link_opens() {
  // Read only after a ring: keep_open writes before it sets the flag, so a read never misses a ring
  // whose flag it took (one whose flag comes a moment later is read by the next take).
  if (opens_bell_ >= 0 && bell_rung_.exchange(false, std::memory_order_acq_rel)) {
    eventfd_t rings = 0;
    (void)eventfd_read(opens_bell_, &rings);  // libc's own call (own_calls.h); the lists are looked at below
  }
  std::vector<std::shared_ptr<StreamLink>> going;  // destroyed after the loop, no link lock held
  for (size_t i = 0; i < links_.size();) {
    std::shared_ptr<StreamLink> link = links_[i];
    std::vector<LinkSetup::Open> opens;
    bool gone = false;
    {
      std::lock_guard lock(link->mu());
      if (link->setup().watched_by_pollers()) {
        // Not in the set (LinkSetup::pollers_join): the event loop's takes read the link's events
        // and arm its queue. What is on the queue is handed out, with no system call: a look every
        // 10 ms while upgrades wait read each link's connection events (two failed calls a link).
        LinkProgress::spin(*link);
      } else {
        // Every completion taken and the queue armed, so that the next completion wakes the set
        // (fd()); its connection events only when no completion event came (a disconnect ends the
        // completions).
        LinkProgress::drain(*link, true, /*cm_when_quiet=*/true);
      }
      opens = link->setup().take_opens();
      // The client let the link go (or it failed): once no channel of ours is on it, neither do we.
      gone = (link->disconnected() || link->stopped()) && link->attached() == 0 && opens.empty();
    }
    if (gone) {
      drop_link(*link);
      going.push_back(std::move(links_[i]));
      links_[i] = std::move(links_.back());
      links_.pop_back();
      continue;
    }
    ++i;
    for (const LinkSetup::Open& o : opens) {
      ++counters_.requests;
      Held held{nullptr, {}, std::chrono::steady_clock::now(), link, o.slot, o.request};
      if (!valid_open(o.request)) {
        ++counters_.rejected_malformed;
        say_no(held, DeclineReason::kServerStaysTcp);
        continue;
      }
      // The same proof as an rdma_cm request's, against the link's own addresses.
      if (!tuple_matches(o.request.tuple, rdma_get_peer_addr(link->id()), rdma_get_local_addr(link->id()))) {
        ++counters_.rejected_forged;
        say_no(held, DeclineReason::kServerStaysTcp);
        continue;
      }
      ConnectRequest& r = held.request;  // what the rest of the listener reads of any request
      r.magic = kSetupMagic;
      r.version = kProtocolVersion;
      r.ring_size_log2 = o.request.ring_size_log2;
      r.rkey = o.request.rkey;
      r.queue_depth = o.request.queue_depth;
      r.max_server_ring_log2 = o.request.max_server_ring_log2;
      r.tuple = o.request.tuple;
      r.client_nonce = o.request.client_nonce;
      admit(held);
    }
  }
}

void StreamListener::admit(const Held& incoming) {
  const ConnectRequest& request = incoming.request;
  heard_[ClientAddress(request.tuple)] = incoming.since;
  // Two requests for one connection: one of them is not its client's, and nothing tells which. Both
  // are rejected, and any other for it within the hold: the connection stays TCP (a downgrade is all
  // the other can cause; taking the stream over would need a record in the TCP stream, see
  // docs/architecture.md, "Security model").
  if (size_t i = find_held(request.tuple); i < held_.size()) {
    counters_.rejected_duplicate += 2;
    say_no(held_[i], DeclineReason::kDuplicate);
    remove_held(i);
    say_no(incoming, DeclineReason::kDuplicate);
    remember_declined(request.tuple, DeclineReason::kDuplicate);
    return;
  }
  for (size_t i = 0; i < declined_.size(); ++i) {
    if (std::memcmp(&declined_[i].tuple, &request.tuple, sizeof request.tuple) == 0) {
      ++counters_.rejected_declined;
      say_no(incoming, declined_[i].why);
      declined_[i] = declined_.back();
      declined_.pop_back();
      return;
    }
  }
  held_.push_back(incoming);
  if (admitted_.size() < kAdmittedKept) {
    admitted_.push_back(request.tuple);
  } else {
    admitted_missed_ = true;
  }
}

bool StreamListener::take_admitted(std::vector<TcpTuple>* out) {
  out->insert(out->end(), admitted_.begin(), admitted_.end());
  admitted_.clear();
  bool whole = !admitted_missed_;
  admitted_missed_ = false;
  return whole;
}

std::chrono::steady_clock::time_point StreamListener::last_heard(const TcpTuple& tuple) const {
  auto it = heard_.find(ClientAddress(tuple));
  return it == heard_.end() ? std::chrono::steady_clock::time_point{} : it->second;
}

bool StreamListener::holds_other_from(const TcpTuple& tuple) const {
  ClientAddress client(tuple);
  for (const Held& h : held_) {
    if (ClientAddress(h.request.tuple) == client && std::memcmp(&h.request.tuple, &tuple, sizeof tuple) != 0) return true;
  }
  return false;
}

void StreamListener::decline(const TcpTuple& tuple, DeclineReason why) {
  OwnCalls own;  // own_calls.h
  if (size_t i = find_held(tuple); i < held_.size()) {
    ++counters_.rejected_declined;
    say_no(held_[i], why);
    remove_held(i);
    return;
  }
  remember_declined(tuple, why);  // not here yet
}

void StreamListener::remember_declined(const TcpTuple& tuple, DeclineReason why) {
  // Longer than any hold: a request comes within a hold of its connection's accept, or never.
  // Bounded: the oldest goes first.
  auto now = std::chrono::steady_clock::now();
  std::erase_if(declined_, [&](const Declined& d) { return now - d.since > std::chrono::seconds(30); });
  if (declined_.size() >= 1024) declined_.erase(declined_.begin());
  declined_.push_back(Declined{tuple, why, now});
}

void StreamListener::collect(std::chrono::milliseconds hold) {
  OwnCalls own;  // own_calls.h
  rdma_cm_event* event = nullptr;
  while (rdma_get_cm_event(channel_, &event) == 0) take_event(event);
  take_link_opens();
  // An open held from a link that failed since cannot be answered, and its client has given up on it.
  std::erase_if(held_, [](const Held& h) {
    if (h.link == nullptr) return false;
    std::lock_guard lock(h.link->mu());
    return h.link->stopped() || h.link->disconnected();
  });
  auto now = std::chrono::steady_clock::now();
  // A client not heard from for a minute keeps no wait alive (the longest upgrade timeout a rule
  // sensibly has): its entry goes, once a second at most.
  if (now - heard_pruned_ > std::chrono::seconds(1)) {
    std::erase_if(heard_, [&](const auto& entry) { return now - entry.second > std::chrono::minutes(1); });
    heard_pruned_ = now;
  }
  for (size_t i = 0; i < held_.size();) {
    if (now - held_[i].since > hold) {
      ++counters_.rejected_expired;
      say_no(held_[i], DeclineReason::kExpired);
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
  std::unique_ptr<RdmaStream> answered;
  if (Status s = begin_accept(tuple, server_nonce, options, &answered); s != Status::kOk) return s;
  if (Status s = answered->await_established(); s != Status::kOk) return s;
  *out = std::move(answered);
  return Status::kOk;
}

size_t StreamListener::find_held(const TcpTuple& tuple) const {
  for (size_t i = 0; i < held_.size(); ++i) {
    if (std::memcmp(&held_[i].request.tuple, &tuple, sizeof tuple) == 0) return i;
  }
  return held_.size();
}

Status StreamListener::begin_accept(const TcpTuple& tuple, uint64_t server_nonce, const StreamOptions& options,
                                    std::unique_ptr<RdmaStream>* out) {
  OwnCalls own;  // own_calls.h
  if (!valid_options(options)) return Status::kInvalid;
  size_t i = find_held(tuple);
  return i < held_.size() ? accept_held(i, server_nonce, options, out) : Status::kWouldBlock;
}

Status StreamListener::begin_accept(const TcpTuple& tuple, const StreamOptions& options,
                                    std::unique_ptr<RdmaStream>* out) {
  OwnCalls own;  // own_calls.h
  if (!valid_options(options)) return Status::kInvalid;
  size_t i = find_held(tuple);
  return i < held_.size() ? accept_held(i, random_nonce(), options, out) : Status::kWouldBlock;
}

Status StreamListener::accept_any(std::chrono::milliseconds timeout, std::unique_ptr<RdmaStream>* out) {
  OwnCalls own;  // own_calls.h
  auto deadline = Deadline::in(timeout);
  for (;;) {
    while (held_.empty()) {
      if (deadline.passed()) return Status::kTimeout;
      // Opens on our links raise no event here: look again at least every 20 ms.
      pollfd p{channel_->fd, POLLIN, 0};
      os().poll(&p, 1, std::min(deadline.poll_ms(), 20));
      collect(timeout);
    }
    // A request refused for its size is not the one to wait for: the next may be.
    std::unique_ptr<RdmaStream> answered;
    Status s = accept_held(0, random_nonce(), options_, &answered);
    if (s == Status::kRefused) continue;  // refused for its size: the next request may be the one
    if (s == Status::kOk) s = answered->await_established();
    if (s == Status::kOk) *out = std::move(answered);
    return s;
  }
}

Status StreamListener::accept_held(size_t index, uint64_t server_nonce, const StreamOptions& options,
                                   std::unique_ptr<RdmaStream>* out) {
  OwnCalls own;  // own_calls.h
  Held held = held_[index];
  remove_held(index);
  if (held.request.ring_size_log2 > options.max_peer_ring_size_log2) {
    // Its ring would cost us a bounce buffer as large, pinned: refused before anything is made.
    say_no(held, DeclineReason::kRingTooLarge);
    return Status::kRefused;
  }
  // Our ring as the client allows (its bounce buffer mirrors it) and as the pinning limit allows,
  // with the client's ring mirrored here (pin_budget.h). A ring that starts small starts within what
  // the client asked; it grows by offers, which the client takes only if it can mirror them then.
  StreamOptions sized = options;
  if (uint32_t asked = held.request.max_server_ring_log2; asked != 0) {
    if (RdmaStream::ring_grows(sized)) {
      sized.start_ring_size_log2 = std::min<uint32_t>(sized.start_ring_size_log2, asked);
    } else {
      sized.ring_size_log2 = std::min<uint32_t>(sized.ring_size_log2, asked);
    }
  }
  uint32_t wanted = RdmaStream::first_ring_log2(sized);
  PinReservation pin(wanted, held.request.ring_size_log2, stream_fixed_pin(options.send_queue_depth),
                     RdmaStream::ring_grows(sized));
  if (pin.choice().ring_log2 == 0) {
    say_no(held, DeclineReason::kPinLimit);
    return Status::kPinLimit;
  }
  RdmaStream::set_first_ring(&sized, pin.choice().ring_log2);
  if (held.link != nullptr) {
    Status s = RdmaStream::accept_on_link(held.link, held.slot, held.open, server_nonce, sized, out);
    if (s == Status::kOk) ++counters_.accepted;
    return s;
  }
  std::unique_ptr<RdmaStream> stream(new RdmaStream);
  stream->tuple_ = held.request.tuple;
  stream->client_nonce_ = held.request.client_nonce;
  stream->server_nonce_ = server_nonce;
  if (Status made = stream->link_->open_cm_channel(); made != Status::kOk) {
    reject(held.id, held.request, DeclineReason::kResources);
    return made == Status::kNoDevice ? Status::kResources : made;
  }
  // Each stream gets its own event channel, so that its events never reach the listener.
  if (rdma_migrate_id(held.id, stream->link_->cm_channel()) != 0) {
    reject(held.id);
    return Status::kReset;
  }
  if (int full = crowded_from(rdma_get_peer_addr(held.id), sized.recv_queue_depth); full > 0) {
    stream->link_->size_for_crowd(full);
  }
  Status s = stream->create_resources(held.id, sized);
  if (s == Status::kOk) s = stream->start(held.request.ring_size_log2, held.request.rkey, held.request.queue_depth, false);
  if (s != Status::kOk) {
    Decline d = decline_record(held.request, s == Status::kMemoryLock ? DeclineReason::kMemoryLock
                                             : s == Status::kRefused  ? DeclineReason::kRingTooLarge
                                                                      : DeclineReason::kResources);
    rdma_reject(held.id, &d, sizeof d);  // the stream's destructor destroys the id
    return s;
  }
  AcceptReply reply{};
  stream->describe_ourselves(&reply, sized);
  reply.client_nonce = held.request.client_nonce;
  reply.server_nonce = server_nonce;
  rdma_conn_param param{};
  param.private_data = &reply;
  param.private_data_len = sizeof reply;
  param.retry_count = RdmaStream::kRetryCount;
  param.rnr_retry_count = 0;
  param.qp_num = stream->link_->qp_num();
  // kReset: a request held past its client's wait, whose connection the kernel ended (move_qp).
  if (Status ready = stream->link_->ready_to_send(); ready != Status::kOk) {
    Decline d = decline_record(held.request, DeclineReason::kResources);
    rdma_reject(held.id, &d, sizeof d);
    return ready;
  }
  // Its link takes later opens from the same client process (links.md); the listener answers them.
  links_.push_back(stream->link_);
  serve_link(stream->link_);
  if (rdma_accept(held.id, &param) != 0) return Status::kReset;
  ++counters_.accepted;
  *out = std::move(stream);
  return Status::kOk;
}

int StreamListener::crowded_from(const sockaddr* peer, int depth) const {
  // By host, not by port: each of the client's links comes from an rdma_cm port of its own. Another
  // process of that host whose link is full makes this one a crowd's too (a larger queue, no more).
  uint8_t host[16];
  uint8_t family = tuple_address(peer, host);
  if (family == 0) return 0;
  int largest = 0;
  for (const std::shared_ptr<StreamLink>& link : links_) {
    uint8_t other[16];
    if (tuple_address(rdma_get_peer_addr(link->id()), other) != family || std::memcmp(host, other, 16) != 0) continue;
    std::lock_guard lock(link->mu());
    if (link->live_but_full(depth)) largest = std::max(largest, link->receive_capacity());
  }
  return largest;
}

Status RdmaStream::await_established() {
  OwnCalls own;  // own_calls.h
  if (link_open_) return Status::kOk;  // a channel on a live link is ready once answered
  // The link's connection events are taken by whoever holds its lock: the listener takes them with
  // the link's opens from the moment of the accept, so the establishment is read from the link, not
  // from the channel (the listener's lock need not be held). A wait is bounded by 20 ms: the event
  // that wakes it may be taken by another thread first.
  auto deadline = Deadline::in_ms(options_.timeout_ms);
  std::unique_lock lock(mu_);
  for (;;) {
    LinkProgress::take_cm_events(*link_, *this);
    if (link_->established()) return Status::kOk;
    if (link_->setup_failed() || link_->disconnected()) return Status::kReset;
    if (deadline.passed()) return Status::kTimeout;
    pollfd p{link_->cm_fd(), POLLIN, 0};
    lock.unlock();
    os().poll(&p, 1, std::min(deadline.poll_ms(), 20));
    lock.lock();
  }
}

}  // namespace tcp2rdma::transport
