// The server side of stream setup: listens with librdmacm and holds each connection request until the
// TCP connection it names has been accepted (docs/protocol.md, "Setup"). A request that nobody claims
// within the hold time is rejected, as is any whose private data is malformed.
#pragma once

#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "rdma_stream.h"
#include "tuple_hash.h"

namespace tcp2rdma::transport {

class StreamListener {
 public:
  struct Counters {
    uint64_t requests = 0;
    uint64_t accepted = 0;
    uint64_t rejected_malformed = 0;
    uint64_t rejected_expired = 0;
    uint64_t redirected = 0;
    uint64_t rejected_declined = 0;
    uint64_t rejected_forged = 0;     // the tuple's addresses are not the request's own
    uint64_t rejected_duplicate = 0;  // two requests for one connection: both
  };
  // A held request sent to another port (redirect()).
  struct Redirected {
    TcpTuple tuple;
    uint16_t port;
  };

  // Listens at `address` (an IPv4-mapped one at the IPv4 address it is). `ipv6_only` is the
  // application socket's IPV6_V6ONLY: an IPv6 wildcard listener without it also takes IPv4 requests,
  // as a dual-stack socket takes IPv4 connections; with it, an IPv4 listener may share the port.
  // The options it listens with (those of the rule that matched its listen()).
  const StreamOptions& options() const { return options_; }
  static Status listen(const sockaddr* address, const StreamOptions& options, std::unique_ptr<StreamListener>* out,
                       bool ipv6_only = false);
  ~StreamListener();
  StreamListener(const StreamListener&) = delete;
  StreamListener& operator=(const StreamListener&) = delete;

  // Pollable (POLLIN) when a connection request may be waiting: call collect() then. Requests come by
  // rdma_cm and, as opens, on the links of streams accepted here; the descriptor is an epoll set over
  // the cm channel, the completion channel of each link no event loop watches, and a bell that a
  // thread which took an open off a link rings, so that an open is seen when it comes, not at the
  // next timed look (docs/links.md).
  int fd() const { return wake_set_ >= 0 ? wake_set_ : channel_->fd; }
  // Whether fd() is readable for the opens on links too (else for rdma_cm's requests only, or a link
  // the set could not take: opens are seen by collecting again).
  bool wakes_for_opens() const {
    return wake_set_ >= 0 && set_counts_.unseen.load(std::memory_order_relaxed) == 0;
  }
  // Whether some links are out of fd()'s set because an event loop watches them (docs/links.md, "the
  // listener's wake"): their opens ring the bell when the loop takes them, which it does only when it
  // comes back to its wait. A thread that waits in the application's accept may be that very loop.
  bool leaves_links_to_loops() const { return set_counts_.left_to_loops.load(std::memory_order_relaxed) > 0; }
  // Takes the requests that arrived off the channel without waiting, and rejects those held longer
  // than `hold`.
  void collect(std::chrono::milliseconds hold);
  // Accepts the held request for `tuple` (as its client sees it), with the listener's options or with
  // `options` (the rule that matched this connection). kWouldBlock when there is none yet.
  Status accept(const TcpTuple& tuple, uint64_t server_nonce, std::unique_ptr<RdmaStream>* out);
  Status accept(const TcpTuple& tuple, uint64_t server_nonce, const StreamOptions& options,
                std::unique_ptr<RdmaStream>* out);
  // accept() in two steps, so that a caller that serialises its listener's use with a lock holds it
  // for the first only: begin_accept answers the request (kWouldBlock when there is none yet) and
  // hands over the stream, whose await_established() then waits, up to its timeout, for the client to
  // complete the handshake, which a client that never does cannot stall other accepts with.
  Status begin_accept(const TcpTuple& tuple, uint64_t server_nonce, const StreamOptions& options,
                      std::unique_ptr<RdmaStream>* out);
  // The same, drawing the server's nonce only when the request is held: a look that finds none costs
  // no system call (the upgrade engine looks for thousands of requests).
  Status begin_accept(const TcpTuple& tuple, const StreamOptions& options, std::unique_ptr<RdmaStream>* out);
  // The tuples of the requests held since the last call (whoever collected them), appended to *out:
  // the upgrade engine looks up its waits by them instead of looking at every wait each round. False
  // when some were not kept (more than kAdmittedKept between two calls): look at every wait then.
  bool take_admitted(std::vector<TcpTuple>* out);
  static constexpr size_t kAdmittedKept = 4096;
  // When a request from the client address of `tuple` last came (held, or answered at once), or the
  // epoch if none did lately. A server connection's wait for its request is measured from the later
  // of its accept and this: while a client keeps asking, its later requests are still coming (its
  // upgrades wait in its own queue; docs/links.md, "The upgrade engine"). Only requests that passed
  // their proof count: a peer can keep alive the waits of its own address only.
  std::chrono::steady_clock::time_point last_heard(const TcpTuple& tuple) const;
  // Whether a request from the client address of `tuple` for another connection is held: that client
  // waits for a connection the server has not accepted yet, and may ask for `tuple`'s only after.
  bool holds_other_from(const TcpTuple& tuple) const;
  // Answers each held request for which `port_for(tuple)` names a port (non-zero) with a rejection
  // that sends its client there (a Redirect): the directory of a pre-fork server, whose other
  // processes listen on ports of their own. Returns what it sent where.
  std::vector<Redirected> redirect(const std::function<uint16_t(const TcpTuple&)>& port_for);
  // The server will not upgrade the connection `tuple` (it stays TCP): its client's request is
  // rejected at once, held or still to come (for up to the hold time), rather than left to expire
  // while the client waits; the rejection tells the client `why` (a Decline record).
  void decline(const TcpTuple& tuple, DeclineReason why = DeclineReason::kServerStaysTcp);
  // The rdma_cm port this listener is bound to (host order): the one asked for, or the one given.
  uint16_t port() const;
  // Waits up to `timeout` for any request and accepts it (tests and tools, where no TCP connection
  // is paired).
  Status accept_any(std::chrono::milliseconds timeout, std::unique_ptr<RdmaStream>* out);

  size_t held() const { return held_.size(); }
  const Counters& counters() const { return counters_; }

 private:
  // A request held until its TCP connection is accepted: an rdma_cm connect request (id), or an open
  // on a link this listener accepted earlier (link, the client's slot, its channel index).
  struct Held {
    rdma_cm_id* id;
    ConnectRequest request;
    std::chrono::steady_clock::time_point since;
    std::shared_ptr<StreamLink> link = nullptr;
    uint32_t slot = 0;
    ChannelOpen open{};
  };
  StreamListener() = default;
  void take_event(rdma_cm_event* event);
  // Takes the opens that arrived on this listener's links (stream_channels.cpp).
  void take_link_opens();
  // A request that passed its checks: held, or answered at once (a duplicate, a declined tuple).
  void admit(const Held& held);
  // No to a held request, with a Decline record (rdma_cm) or a refusal in its slot (link), saying why
  // (and where to go instead: a redirect's port).
  void say_no(const Held& held, DeclineReason why, uint16_t redirect_port = 0);
  Status accept_held(size_t index, uint64_t server_nonce, const StreamOptions& options,
                     std::unique_ptr<RdmaStream>* out);
  // A rejection without a word (malformed, forged, no longer wanted), or with a Decline record that
  // tells the request's client why.
  void reject(rdma_cm_id* id);
  void reject(rdma_cm_id* id, const ConnectRequest& request, DeclineReason why);
  void remember_declined(const TcpTuple& tuple, DeclineReason why);
  void remove_held(size_t index);
  // The index of the held request for `tuple`, or held_.size().
  size_t find_held(const TcpTuple& tuple) const;
  // The receives of the largest live link of ours from the host `peer` that is full for a channel
  // whose rule says `depth`, or 0: the client's next link is then a crowd's (StreamLink::
  // size_for_crowd), as the client sizes its own.
  int crowded_from(const sockaddr* peer, int depth) const;
  // A link of a stream accepted here starts or stops ringing our bell and waking our set.
  void serve_link(const std::shared_ptr<StreamLink>& link);
  void drop_link(StreamLink& link);

  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  int wake_set_ = -1;    // fd(): the epoll set (-1 when none could be had: the cm channel is polled)
  int opens_bell_ = -1;  // an eventfd in it, written when an open is put on a link's list
  std::atomic<bool> bell_rung_{false};  // set after each write: a take reads the eventfd only then
  LinkSetup::SetCounts set_counts_;      // links out of the set (LinkSetup::set_bell)
  StreamOptions options_;
  std::vector<Held> held_;
  // The links of the streams accepted here, kept for the client's next streams until the client lets
  // them go (a disconnect) or the listener closes.
  std::vector<std::shared_ptr<StreamLink>> links_;
  struct Declined {
    TcpTuple tuple;
    DeclineReason why;
    std::chrono::steady_clock::time_point since;
  };
  std::vector<Declined> declined_;
  std::vector<TcpTuple> admitted_;  // held since the last take_admitted()
  bool admitted_missed_ = false;
  std::unordered_map<ClientAddress, std::chrono::steady_clock::time_point, ClientAddressHash> heard_;
  std::chrono::steady_clock::time_point heard_pruned_{};
  Counters counters_;
};

// Whether a ConnectRequest or AcceptReply describes a peer we can talk to.
bool valid_request(const ConnectRequest& r);
bool valid_reply(const AcceptReply& r, uint64_t client_nonce);
bool valid_redirect(const Redirect& r, uint64_t client_nonce);
bool valid_open(const ChannelOpen& o);
// Why a rejection's private data (read as a Redirect) says the server declined: kNone when it is not a
// valid Decline for this client's request.
DeclineReason decline_reason(const Redirect& rejection, uint64_t client_nonce);
bool valid_options(const StreamOptions& o);
// Whether a request with `tuple` comes from the tuple's client address and arrived at its server
// address (rdma_cm's view of the request: its source and destination).
bool tuple_matches(const TcpTuple& tuple, const sockaddr* source, const sockaddr* destination);

}  // namespace tcp2rdma::transport
