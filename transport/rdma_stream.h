// A reliable byte stream over one RC queue pair: setup with librdmacm, data by RDMA Write with
// immediate into the peer's ring, credits through the mailbox (docs/protocol.md).
//
// Thread safety: every call may come from any thread. Writers are serialised among themselves, as are
// readers; a reader and a writer run at the same time. A blocking call sleeps on the stream's channels
// without holding its lock.
#pragma once

#include <rdma/rdma_cma.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "channel_readiness.h"
#include "deadline.h"
#include "flow_control.h"
#include "link_progress.h"
#include "path_failover.h"
#include "registration_cache.h"
#include "ring_growth.h"
#include "sent_ledger.h"
#include "status.h"
#include "stream_link.h"
#include "wire.h"

namespace tcp2rdma::transport {

class ByteSource;  // byte_source.h

struct StreamOptions {
  uint32_t ring_size_log2 = 20;     // 1 MiB receive ring (10..29)
  // The ring starts at this size and grows to ring_size_log2 once the peer's bytes fill it, as the
  // pinning budget allows (docs/links.md, "Rings that grow and shrink"). 0: it has ring_size_log2 from the start.
  uint32_t start_ring_size_log2 = 0;
  // The largest ring the peer may ask us to write into: our bounce buffer mirrors it, allocated and
  // pinned on our side, so the peer must not choose its size alone. A larger one is refused.
  uint32_t max_peer_ring_size_log2 = 22;
  uint16_t recv_queue_depth = 64;   // receives posted for the peer's messages (4..255)
  uint16_t send_queue_depth = 320;  // at least the peer's receive depth plus signalling headroom
  // Channels a link made for this stream is sized for (its receive queue: each channel takes its
  // depth and one more), as far as the device and StreamLink::kLinkReceives allow.
  uint16_t link_channels = 96;
  int timeout_ms = 5000;            // setup, and how long close() waits for its bytes to be acknowledged
  size_t zcopy_threshold = 64 * 1024;  // a contiguous piece at least this long goes from the caller's
                                       // buffer by RDMA Write (0: never)
  uint32_t inline_threshold = 128;  // pieces up to this long travel inside the work request
  int busy_poll_us = 1000;          // a blocked call polls this long before it sleeps
  bool busy_poll_adaptive = true;   // an event loop's wait polls up to busy_poll_us, as it pays (spin_budget.h)
  SpinYield busy_poll_yield = SpinYield::kSoftwareDevice;  // and gives the CPU away between polls
  int keepalive_ms = 5000;          // a blocked call probes an idle peer this often (0: never)
  // A grown ring goes back to its first size when the peer sent nothing between two periodic looks
  // at the stream (the path watcher's, or a blocked call's keepalive: every keepalive_ms) and all it
  // sent was read (docs/links.md, "Rings that grow and shrink"). false: grown rings stay.
  bool shrink_when_idle = true;
  // While our application waits for room to write, the peer's bytes that fill our ring are moved
  // into ordinary memory, up to this many (stream_spill.cpp): two applications that each write a
  // message larger than both rings before they read the other's would otherwise wait for each other
  // for good, where kernel TCP's buffers (about 4 MiB on loopback) take it. 0: never.
  size_t spill_limit = size_t{4} << 20;
  uint8_t ack_timeout_log2 = 16;    // each try of a send waits 4.096 us * 2^this for its ack (about
                                    // 270 ms); after 7 retries the connection is reset
  size_t registration_cache_entries = 16;
  // When the path fails (path_failed), the stream waits to be failed over instead of reporting a
  // reset: calls return kPathFailed and readiness() reports nothing until leave_path and
  // finish_leaving (the connection goes on over TCP) or give_up_path (a reset after all). The
  // preload layer sets it; a stream nobody fails over must not (its calls would wait for ever).
  bool fail_over = false;
};

// How much of a write of `len` bytes goes by zero-copy: all of it at or above the threshold.
inline size_t zero_copy_part(size_t len, const StreamOptions& options) {
  return options.zcopy_threshold > 0 && len >= options.zcopy_threshold ? len : 0;
}

// Flags of read() and write().
inline constexpr int kNonBlocking = 1;  // return kWouldBlock instead of waiting
inline constexpr int kPeek = 2;         // read: leave the bytes in the stream
inline constexpr int kWaitAll = 4;      // read: wait until every iovec is full (or end, or error)
// write: more follows at once (MSG_MORE, TCP_CORK): the bytes may be held, unposted, to go in one
// message with the next write's (docs/protocol.md, "Holding a message back").
inline constexpr int kMore = 8;

struct StreamCounters {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;  // consumed by the application
  uint64_t zcopy_bytes = 0;     // sent by RDMA Write straight from the caller's buffer
  uint64_t zcopy_fallbacks = 0; // large pieces copied because their buffer could not be registered
  uint64_t inline_messages = 0;
  uint64_t credit_stalls = 0;   // a write found no ring space or receive credit
  uint64_t bytes_spilled = 0;   // of the peer's, moved out of our ring while our writer waited (spill_limit)
  uint64_t completions = 0;
  uint64_t wakeups_received = 0;
  uint64_t mailbox_updates_sent = 0;
  uint64_t keepalives_sent = 0;
  uint64_t zcopy_in_flight = 0;  // now: zero-copy writes not yet completed (the adapter may read them)
  uint64_t end_waiting = 0;      // now: 1 while our end waits for a receive the peer has not given us
  RegistrationCache::Counters registrations;
};

struct Readiness {
  bool readable = false;  // read() would not block: bytes, end of stream, or an error
  bool writable = false;  // write() would take at least one byte, or fail at once
  bool failed = false;    // reset or protocol error: every call now fails
  bool peer_closed = false;
  bool read_shut = false;  // shutdown(SHUT_RD) here: the receiving side is over too
  bool error_pending = false;  // an error SO_ERROR would report (the kernel's POLLERR without a reset)
  // Both directions are over (the kernel's POLLHUP): our sending side shut down (or reset by the
  // peer's leaving) and the receiving side ended (the peer's end, or our SHUT_RD).
  bool hung_up = false;
  uint64_t bytes_readable = 0;  // what read() would return now, at most
  bool moved = false;  // both directions went back to TCP and nothing is left to read (RdmaStream::moved)
};

// The TCP connection a client stream belongs to, and the client's nonce (docs/protocol.md, "Setup").
struct Pairing {
  TcpTuple tuple{};
  uint64_t client_nonce = 0;
  // What the client writes first on the stream, when it knows before the connect (at most
  // kOpenFirstBytes). A channel opened on a live link carries them in its open: they are then the
  // first bytes the server reads (first_bytes_in_open()), and the client must not write them again.
  // A stream made by rdma_cm carries none: the client writes them as any bytes.
  std::span<const uint8_t> first_bytes{};
};
uint64_t random_nonce();  // from getrandom(2)

class RdmaStream {
 public:
  // Transport retries before a send fails. Not 7: rxe takes 7 to mean "retry forever", and a crashed
  // peer host would then never fail a send.
  static constexpr uint8_t kRetryCount = 6;

  // Whether connect() to `address` would open a channel on a live link of this process (one round
  // trip, no rdma_cm), as far as can be known without waiting.
  static bool linked_to(const sockaddr* address);
  // Connects to a StreamListener at `address` (an IP address and the rdma_cm port), following one
  // redirect to another port of the same address (a pre-fork server's directory). kRejected: the
  // server said no; *declined (when given) says why if it did (a Decline record), else kNone.
  static Status connect(const sockaddr* address, const Pairing& pairing, const StreamOptions& options,
                        std::unique_ptr<RdmaStream>* out, DeclineReason* declined = nullptr);
  ~RdmaStream();
  // A stream a listener has answered (StreamListener::begin_accept): waits for the client to complete
  // the connection. kOk: it is ready for use.
  Status await_established();
  RdmaStream(const RdmaStream&) = delete;
  RdmaStream& operator=(const RdmaStream&) = delete;

  // Blocking: returns when every byte was taken. kNonBlocking: takes what fits now (*done may be
  // short), kWouldBlock when nothing fits. Bytes sent by zero-copy have been placed in the peer's ring
  // before write returns, so the caller may reuse its buffer at once; *zero_copied (when given) says
  // how many of *done went so.
  Status write(const iovec* iov, int iovcnt, int flags, size_t* done, size_t* zero_copied = nullptr);
  // Posts the message that writes with kMore left held, if any (the application uncorked). Without
  // room in the link's send queue it goes at the channel's next progress.
  void push();
  // Whether a write with kMore left bytes held.
  bool holds_message() const;
  // One tick of the caller's clock (the path watcher's, every 100 ms): a message held through two
  // ticks goes now, as the kernel sends a corked segment after 200 ms. Returns whether bytes are
  // still held.
  bool push_if_aged();
  // Returns at least one byte, or *done == 0 at the end of the stream. Bytes that arrived before an
  // error are delivered before the error is reported. A blocking read or write that slept while a
  // signal handler ran returns what it moved, or kInterrupted if nothing.
  Status read(const iovec* iov, int iovcnt, int flags, size_t* done);
  // Sends an orderly end after the bytes already written; reading goes on.
  Status shutdown_write();
  // shutdown(SHUT_RD): nothing is sent; a read with nothing buffered returns the end of the stream
  // instead of waiting (bytes that arrive are still read), and pollers see the receiving side ended
  // (POLLIN, POLLRDHUP), as with the kernel's.
  void shutdown_read();
  // The error SO_ERROR reports and clears: EPIPE once after a write the peer's leaving reset (see
  // wrote_after_peer_left_), else 0.
  int take_error();
  // Waits (up to timeout_ms) until every byte written so far is in the peer's memory (acknowledged),
  // where the peer reads it even if a reset follows. Sends nothing of its own.
  Status flush();
  // shutdown_write, waits (up to timeout_ms) until every byte is acknowledged, then disconnects. The
  // peer reads all of them, then the end of the stream.
  Status close();
  // The same, waiting for the acknowledgements until `deadline` instead of timeout_ms from now (a
  // process that ends many streams at once gives them one deadline). A peer that has not acknowledged
  // our end by then reads a reset, never a clean end.
  Status close(Deadline deadline);
  // Tells the peer to reset (best effort) and disconnects at once: the peer never reads a clean end.
  void abort();
  // A server's abort before its switch that asks its client to make a new request (wire.h,
  // kEndAskAgain): its process forked, and the connection's upgrade went on in the one that uses it.
  void abort_asking_again();
  // Moving the connection back onto its TCP socket (docs/protocol.md, "Back to TCP"). Sends our "to
  // TCP" after every byte written so far: later writes return kMovedToTcp, and one under way returns
  // the bytes it placed before it. Then waits (up to timeout_ms) for the peer's "to TCP" and takes
  // every byte of the peer's still unread here into *unread; *peer_ended says whether the peer's
  // stream had ended before it (its sending side was shut down: nothing follows on TCP either). kOk:
  // moved() holds, and the connection goes on on TCP after *unread. Otherwise nothing is taken, and
  // reads go on on the stream until the peer's "to TCP" arrives (then kMovedToTcp).
  // A peer that receives "to TCP" answers with its own at its next progress, without its application.
  Status move_to_tcp(std::vector<uint8_t>* unread, bool* peer_ended);
  // Sends our "to TCP" now (credits permitting; else at the next progress) without waiting for the
  // peer's: a process that moves many connections starts them all, so that their peers answer
  // together, then finishes each with move_to_tcp. `returning`: the marker tells the peer that this
  // side will wait for the connection's return to RDMA at once (wire.h, kEndToTcpReturning).
  void start_move_to_tcp(bool returning = false);
  // The peer's "to TCP" said that its side waits for the connection's return at once.
  bool peer_returns_at_once() const;
  // Both directions went back to TCP and nothing is left to read on the stream: it carries nothing
  // more, and the connection is its TCP socket's again.
  bool moved() const;
  // Our sending side went back to TCP (writes return kMovedToTcp).
  bool writes_moved() const;
  // The peer's sending side went back to TCP and every byte it sent on the stream is read.
  bool reads_moved() const;
  // Our sending side had been shut down before it went back: the TCP socket's must be too.
  bool write_was_shut() const;

  // When the RDMA path fails (docs/protocol.md, "When the RDMA path fails"; stream_failover.cpp).
  // Whether the stream failed on its path (a completion in error, a device removal, a disconnect
  // without an end), not by the peer's word (an abort, a broken protocol): the connection may go on
  // over TCP.
  bool path_failed() const;
  // The peer ended the stream with an abort (in-band, after every byte it had sent before it).
  bool peer_aborted() const;
  // That abort asked for a new request (abort_asking_again).
  bool peer_asked_again() const;
  // A fail_over stream waits to be failed over (its calls return kPathFailed).
  bool failover_pending() const;
  // Where each direction stands once the path is stopped for good: the queue pair in the error state,
  // every completion that was queued before taken. What the failover record says, and what the peer's
  // is checked against.
  struct PathEnd {
    SentCursors sent;
    ReceivedCursors received;
    bool write_shut = false;  // our sending side was shut on the stream (the TCP socket's must be too)
    bool peer_closed = false;
  };
  PathEnd stop_path();
  // Leaves the path at the peer's word that it has our stream up to `peer_received` (checked: an
  // impossible claim is kProtocolError with *why, and nothing is taken). *unread gets every byte of
  // the peer's here not yet read, *resend ours from `peer_received` on, to send again on TCP.
  Status leave_path(uint64_t peer_received, std::vector<uint8_t>* unread, std::vector<uint8_t>* resend,
                    FailoverError* why);
  // After leave_path, once the resend is on TCP and the peer's bytes are where the application reads
  // them first: the stream is moved(), reads and writes return kMovedToTcp, pollers are woken.
  void finish_leaving();
  // The failover cannot happen (the peer is gone, lied, or never answered): the stream is reset after
  // all, with `s` (kReset or kTimeout) for every call from now on; pollers are woken.
  void give_up_path(Status s, const char* why);
  // For a watcher of idle connections: takes the stream's news (connection events, completions) and,
  // with `probe`, sends a keepalive if nothing was sent since the last one. Returns what it found.
  struct PathCheck {
    bool failover_due = false;  // a fail_over stream waits to be failed over (kPathFailed)
    bool moving = false;        // a move back to TCP began, from either side (the TCP socket carries bytes)
    bool over = false;          // failed otherwise, or disconnected by us: nothing more to watch
  };
  PathCheck check_path(bool probe);
  // Bytes that belong before the first byte the peer sends on this stream: the tail of the TCP
  // connection a stream takes over (the preload layer's switch). read() and readiness() serve
  // them first, then what the prefix held before (a client's first bytes its open carried, not yet
  // read). Called once, before the stream is handed to anyone else.
  void set_unread_prefix(std::vector<uint8_t> bytes);

  // Waiting for the stream's readiness (channel_readiness.h): a poller subscribes a news list of its
  // own, under `tag` (one subscription a tag), and sleeps on that list's eventfd and on the link's
  // descriptors. When readiness() reports less than readable and writable (writable: if asked for),
  // or a call returned kWouldBlock, one of them fires on the next change, even when a blocking call
  // of ours sleeps through that change and takes its events: a completion raises the link's event,
  // and whoever takes it (any look at a channel of the link) pushes the news to the subscribers.
  bool subscribe_news(NewsList* list, void* tag) { return readiness_.subscribe(list, tag); }
  void unsubscribe_news(const void* tag) { readiness_.unsubscribe(tag); }
  // A poll or select call (StreamSleeper) may sleep on this stream's link's event from now (+1) until
  // it is done (-1): takes by event loops arm the queue again meanwhile (StreamLink::count_event_sleeper).
  void count_event_sleeper(int change);
  // The link's descriptors to sleep on: its completion channel, and its connection events once they
  // are the link's own (else -1).
  void link_descriptors(int* completions, int* cm_events) const;
  // `want_writable`: the caller waits for room to write; only then is the peer asked to say when
  // room comes back (an arm). A poller of bytes alone must not arm: besides the messages, the peer
  // takes an arm with its ring full for a writer waiting for room, and grows the ring (a 64 KiB echo
  // exactly fills a 64 KiB ring, and its reader's poll for the answer armed: every connection of
  // bench-links grew a 1 MiB ring on both sides).
  // `take_link_events`: take the link's events first (its connection events, kicks and completion
  // event: three system calls that find nothing most of the time). A caller that watches the link
  // through a LinkWatch passes false: its watch's set is readable while any of them waits, and its
  // take() takes them. `only_fired`: a poll or select call that sleeps on the link's descriptors
  // takes from them only what its sleeps saw fire (note_link_fired): a descriptor left with an event
  // stays readable and fires its next sleep at once.
  // `arm`: false for a poll or select call that spins before it sleeps (spin_link): it arms the
  // link in a look after its spin, just before the sleep, since a completion its spin takes from an
  // armed queue still raises the event, which its next sleep would find at once.
  Readiness readiness(bool want_writable = true, bool take_link_events = true, bool only_fired = false,
                      bool arm = true);
  // A poll or select call's spin before it sleeps: the link's completions handed out and their
  // channels told (LinkProgress::spin), no system call when none came.
  void spin_link();
  // The link's rule for such a spin: its busy_poll_us (*adaptive cleared unless adaptive), and
  // whether it gives the CPU away between polls (StreamLink::spin_yields).
  int spin_rule(bool* adaptive, bool* yields) const;
  // A poller's sleep saw the link's completion channel (or its connection events) readable.
  void note_link_fired(bool completions, bool cm);
  // A caller that looked without wanting to write and now does (a second poll entry for the same
  // descriptor): asks the peer to say when room comes back, if there is none now.
  void want_writable();
  // Tells the stream's pollers to look again now, whatever our own calls do meanwhile (a failure, a
  // move, an end: changes that come with no completion of the stream's own).
  void wake_pollers();
  // Probes the peer with a zero-byte RDMA Write when nothing was sent since the last call: a dead peer
  // shows as a failed completion (reset), a live one costs nothing at its CPU.
  Status keepalive();

  StreamCounters counters() const;
  // Why the stream failed, in words (empty while it has not): what failed and the adapter's or the
  // protocol's reason, for the log line.
  std::string failure_detail() const;
  // Where the stream's bytes are, in words (arrived and read of the peer's; sent and consumed by the
  // peer of ours; the link's sends not yet completed): for a log line on a wait that timed out, to
  // tell bytes that never came from bytes that came and were not noticed.
  std::string flow_summary() const;
  uint64_t client_nonce() const { return client_nonce_; }
  int timeout_ms() const { return options_.timeout_ms; }
  int keepalive_ms() const { return options_.keepalive_ms; }
  uint64_t server_nonce() const { return server_nonce_; }
  // Bytes of our receive ring and of the peer's, now (they grow: docs/links.md, "Rings that grow and shrink").
  uint64_t ring_size() const;
  uint64_t peer_ring_size() const;
  // Times our ring moved to a larger one, and back to its first size (our offer adopted, the old
  // ring done).
  uint64_t rings_grown() const;
  uint64_t rings_shrunk() const;
  // The size our ring may grow to (the options' ring size; the pinning budget may allow less).
  uint64_t ring_grows_to() const { return uint64_t{1} << options_.ring_size_log2; }
  // Opened as a channel on a link another stream had made (docs/links.md), not by rdma_cm.
  bool opened_on_link() const { return link_open_; }
  // How many of its first ring and mirror came registered from its link's pool (0 to 2).
  int regions_from_pool() const { return regions_from_pool_; }
  // The stream's first bytes from the client came in its open (Pairing::first_bytes): on a client's
  // stream, the server has them (not to be written again); on a server's, the client sent them so.
  bool first_bytes_in_open() const { return first_bytes_in_open_; }
  const TcpTuple& tuple() const { return tuple_; }

 private:
  friend class StreamListener;
  friend class LinkWatch;
  friend class LinkProgress;  // hands the channel its completions and serves it
  RdmaStream() : link_(std::make_shared<StreamLink>()) {}
  // A channel on a live link: constructed with the link's lock held (it attaches itself).
  explicit RdmaStream(std::shared_ptr<StreamLink> link) : link_(std::move(link)) {}

  static constexpr uint64_t kWrSignal = StreamLink::kWrSignal;
  static constexpr uint64_t kWrCopy = StreamLink::kWrCopy;
  static constexpr uint64_t kWrZeroCopy = StreamLink::kWrZeroCopy;
  static constexpr uint64_t kWrReceive = StreamLink::kWrReceive;
  static constexpr size_t kMailboxSlot = StreamLink::kMailboxSlot;  // the mailbox's place after the ring

  // Setup (stream_setup.cpp).
  // One connection attempt; a valid redirect sets *redirect_port (else 0) and returns kRejected, as
  // does a valid decline, which sets *declined.
  static Status connect_once(const sockaddr* address, const Pairing& pairing, const StreamOptions& options,
                             std::unique_ptr<RdmaStream>* out, uint16_t* redirect_port, DeclineReason* declined);
  // Channels on a live link (stream_channels.cpp): the client's open and its wait for the answer; the
  // server's accept of an open its listener held. Both with the pin reservation already made; the
  // open asks the server's first ring to be at most 2^server_ring_log2 (what the client mirrors now).
  // Each side's depth is the one the link gives (StreamLink::channel_depth), told in the open/answer.
  static Status open_on_link(const std::shared_ptr<StreamLink>& link, const Pairing& pairing, StreamOptions sized,
                             uint32_t server_ring_log2, std::unique_ptr<RdmaStream>* out, uint16_t* redirect_port,
                             DeclineReason* declined);
  static Status accept_on_link(const std::shared_ptr<StreamLink>& link, uint32_t slot, const ChannelOpen& open,
                               uint64_t server_nonce, StreamOptions sized, std::unique_ptr<RdmaStream>* out);
  // Our ring (and mailbox, and for a link's first channel the setup area after it) in the link's
  // protection domain; the channel's readiness set.
  Status create_channel_memory(bool first);
  int receive_quota() const { return options_.recv_queue_depth + 1; }  // its depth and its release
  void send_release();
  void end_on_link();  // after close or abort: our release, or the link's disconnect
  void send_close_with_release();  // a close owed for want of a receive: close and release in one
  void abort_with(uint32_t end);  // abort(), with the end message's argument (wire.h)
  Status progress_unstarted();  // progress() while our open waits for its answer
  // The link for `id` (stream_link.h), then our ring in its protection domain.
  Status create_resources(rdma_cm_id* id, const StreamOptions& options);
  Status start(uint8_t peer_ring_log2, uint32_t peer_rkey, uint8_t peer_depth, bool is_client);
  // What a ConnectRequest and an AcceptReply alike say of our side: the protocol, our ring, our receives.
  template <typename SetupMessage>
  void describe_ourselves(SetupMessage* m, const StreamOptions& options) const {
    m->magic = kSetupMagic;
    m->version = kProtocolVersion;
    m->ring_size_log2 = static_cast<uint8_t>(first_ring_log2(options));
    m->rkey = ring_mr_->rkey;
    m->queue_depth = static_cast<uint8_t>(options.recv_queue_depth);
  }

  // Rings that grow (stream_rings.cpp), all with mu_ held. The ring a stream starts with: its
  // options' start, or its full size.
  static uint32_t first_ring_log2(const StreamOptions& o) {
    return o.start_ring_size_log2 != 0 && o.start_ring_size_log2 < o.ring_size_log2 ? o.start_ring_size_log2
                                                                                    : o.ring_size_log2;
  }
  static bool ring_grows(const StreamOptions& o) { return first_ring_log2(o) < o.ring_size_log2; }
  // Sets the first ring's size in sized options (the start, when the ring starts small).
  static void set_first_ring(StreamOptions* o, uint32_t log2) {
    (o->start_ring_size_log2 != 0 && o->start_ring_size_log2 < o->ring_size_log2 ? o->start_ring_size_log2
                                                                                 : o->ring_size_log2) = log2;
  }
  // The reader's side (RingGrowth: the peer filled our ring, or carries bulk; a periodic look at an
  // idle grown ring). look_idle sends the update that carries its offer.
  void maybe_grow_ring();
  void look_idle();
  // Our registration of ring generation `gen`: the offered ring, the grown one in use, or the first.
  StreamLink::Region ring_region(uint64_t gen) const { return rings_.ring(gen, StreamLink::Region{ring_, ring_mr_}); }
  const uint8_t* ring_memory(uint64_t gen) const { return ring_region(gen).memory; }
  uint32_t ring_rkey(uint64_t gen) const { return ring_region(gen).mr->rkey; }
  // The writer's side: answers the peer's offer (adopted with a mirror for it, or declined).
  void answer_ring_offer();
  // Both sides: frees what a finished move left.
  void settle_rings();
  using Mirror = RingGrowth::Mirror;
  // The bytes from `cursor` (up to `end`) contiguous in one mirror: to its end, and never across the
  // last move. Sets *mirror.
  uint64_t mirror_run(uint64_t cursor, uint64_t end, Mirror* mirror) const;
  Mirror current_mirror() const { return rings_.current(*flow_, {bounce_, bounce_mr_}, peer_ring_size_); }
  // What the channel leaves the link when it goes (StreamLink::retire).
  StreamLink::Retired leftovers() const;
  // Reads our mailbox until it is whole and takes what is new. must_be_whole: before a data message
  // counts while the peer's answer to our offer is awaited (its bytes may be in the offered ring
  // already), a record that stays torn fails the stream.
  Status take_mailbox(bool must_be_whole);

  // Progress (stream_progress.cpp), all with mu_ held.
  // Takes every completion of the link, each to the channel it names, then serves those channels and
  // this one (LinkProgress::hand_out, serve). Returns this channel's status.
  Status progress();
  // Hands one completion to the channel it names (this one, another, or every channel for a flushed
  // receive: LinkProgress::dispatch). Returns this channel's status; another's failure is that channel's.
  Status take_completion(const ibv_wc& wc) { return LinkProgress::dispatch(*link_, wc, this); }
  // Before a wait for this channel's sends to complete: a signalled zero-byte write after our newest
  // send, if that one is unsignalled (its completion would otherwise come only with a later
  // signalled send of anyone's on the link).
  Status signal_tail();
  // The client's answer to its open arrived (or the open cannot be answered: `answer` null).
  void on_answer(const ChannelAnswer* answer);
  // What follows new completions: the link's disconnect, the mailbox, owed ends, credit updates.
  Status serve();
  // The immediate of a message to the peer's end of this channel.
  uint32_t imm(MessageType type, uint32_t arg) const { return encode_imm(type, peer_index_, arg); }
  Status handle_completion(const ibv_wc& wc);
  void on_cm_news(const StreamLink::CmNews& news);  // the link's connection events, as this channel's
  Status send_credits();
  Status request_wakeup();
  enum class MailboxRead { kNothingNew, kNew, kTorn };
  MailboxRead read_mailbox(MailboxUpdate* update);
  // Posts to the peer's current ring (data and signals) or, for a mailbox update, to its first ring's
  // registration, where its mailbox stays.
  Status post_write(const void* local, uint32_t length, uint32_t lkey, uint64_t remote_offset, uint32_t imm,
                    bool with_imm, int send_flags, uint64_t wr_kind);
  Status post_write_to(uint32_t rkey, const void* local, uint32_t length, uint32_t lkey, uint64_t remote_offset,
                       uint32_t imm, bool with_imm, int send_flags, uint64_t wr_kind);
  // Whether n more sends fit in the link's send queue. When they do not, whatever the caller leaves
  // undone (a data message, a credit update, an owed end, a wakeup) waits for a send completion,
  // which may be another channel's: the channel is marked to be served and told then
  // (touch_room_waiters), so that nothing it skipped waits for a change that tells nobody.
  bool send_queue_has_room(int n) {
    if (link_->send_queue_has_room(n)) return true;
    waits_for_send_room_ = true;
    link_->note_waits_for_room(index_);
    return false;
  }
  // Another thread handed us news: serve() is due, by whoever serves the link's touched channels.
  void touch() {
    touched_ = true;
    link_->note_touched(index_);
  }
  // Waits for the link's news (LinkProgress::wait: a spin of up to busy_poll_us, then a sleep) and
  // acts on how the wait ended: serves news another thread handed it, tells its pollers of the event
  // it took, and after keepalive_ms of quiet looks at the idle stream and probes the peer.
  // `interruptible` (an application's blocking read or write): a signal handler that ran during the
  // sleep ends the wait with kInterrupted, so the caller can report it as the kernel would.
  // `max_sleep_ms` (>= 0) bounds the sleep, for a caller with a deadline of its own.
  Status wait(std::unique_lock<std::mutex>& lock, bool interruptible = false, int max_sleep_ms = -1);
  // A non-blocking call that would block: LinkProgress::arm when someone relies on the link's event
  // (StreamLink::relied_on), else nothing.
  Status arm_if_relied_on(bool* news);
  Status keepalive_locked();
  Status flush_locked(std::unique_lock<std::mutex>& lock, Deadline deadline);
  void kick();
  bool post_owed_end(uint32_t which, bool credit);  // kEndClose or kEndToTcp, when credit allows
  void send_move_marker();
  void send_owed_close();
  // Starts a data message of up to the room there is with the caller's bytes, unposted (held_), its
  // credit taken. Returns the bytes it took (0: no room now).
  uint64_t start_message(ByteSource& src);
  // Appends the caller's bytes to the held message, within the ring's room and up to its end.
  uint64_t join_held(ByteSource& src);
  // A write would take a byte now: into a new message, or into the held one (writable, as polled).
  bool takes_bytes() const;
  // Posts the held message. kWouldBlock: no room in the link's send queue; it goes at the channel's
  // next serve() (held_.due).
  Status post_held();
  // Fails the stream for good and takes its queue pair to the error state, so that the adapter flushes
  // every work request (none touches a buffer of ours or the caller's after this returns, once the
  // flushed completions are polled: drain_after_failure).
  void fail_and_stop(Status s);
  // After the stream failed by its peer's word, on a link that works: its zero-copy sends in flight
  // are waited for (polled), up to the stream's timeout, instead of stopping the link.
  void wait_out_sends(std::unique_lock<std::mutex>& lock);
  void drain_after_failure(std::unique_lock<std::mutex>& lock);
  void take_drained(const ibv_wc& wc);  // one completion the drain polled (or an older send's)
  bool moved_locked() const;
  // What a poller of the channel can see, with mu_ held: compared around a completion the caller
  // takes for itself, so that only a change a poller could see tells its pollers (dispatch).
  struct PollMark {
    size_t readable = 0;  // bytes a read would return
    unsigned ends = 0;    // one bit per end, failure or move a poll reports
    bool writable = false;
    // Whether `after` shows a poller something `before` did not: bytes arrived, an end, or room to
    // write where there was none (as the kernel wakes a socket's pollers on data, a state change, and
    // write space once a writer found none).
    static bool news(const PollMark& before, const PollMark& after) {
      return after.readable > before.readable || after.ends != before.ends || (after.writable && !before.writable);
    }
  };
  PollMark poll_mark_locked() const;

  // Failover bookkeeping (stream_failover.cpp), with mu_ held.
  // A send completion: the link's count, and a data message's in the ledger (sent_ledger.h).
  void note_send_completion(const ibv_wc& wc);
  // A zero-copy write that stops before all its bytes were acknowledged copies the rest into the
  // bounce mirror from the caller's buffer, which it still holds (src is our cursor src_cursor).
  void keep_unacknowledged(const uint8_t* src, uint64_t src_cursor);
  SentCursors sent_cursors() const;
  bool peer_done() const { return flow_->peer_closed() || flow_->peer_moved(); }  // a started stream's
  // The peer's application is done with the channel: its close and its release (links.md, "Ending a
  // channel"), or its move to TCP. Only then is a disconnect the connection's end: after a shutdown
  // alone the peer still reads, and a disconnect is its path failing (or its process gone).
  bool peer_left() const { return flow_->peer_moved() || (flow_->peer_closed() && flow_->peer_released()); }

  // Data path (stream_io.cpp), with mu_ held.
  // One zero-copy piece of the caller's, or a run of pieces sent by copy (byte_source.h).
  Status write_piece(ByteSource& src, int flags, size_t* done, std::unique_lock<std::mutex>& lock);
  Status write_zero_copy(const uint8_t* src, size_t len, int flags, size_t* done, std::unique_lock<std::mutex>& lock);
  Status write_copy(ByteSource& src, int flags, size_t* done, std::unique_lock<std::mutex>& lock);
  size_t copy_out(const iovec* iov, int iovcnt, size_t skip, bool consume);
  size_t copy_prefix(const iovec* iov, int iovcnt, bool consume);
  size_t prefix_left() const { return prefix_.size() - prefix_pos_; }
  // Our writer waits for room and our ring is full of the peer's unread bytes, with no larger ring on
  // its way: moves them behind the prefix and gives the peer the room (stream_spill.cpp).
  void spill_when_stuck();
  bool failed() const { return failure_ != Status::kOk; }
  // A fail_over stream whose path failed and that is neither failed over nor given up yet.
  bool failover_due() const { return options_.fail_over && path_failed_ && !path_given_up_ && !left_path_; }
  // What a call reports outward: a reset while the failover is due is kPathFailed.
  Status outward(Status s) const {
    return failover_due() && (s == Status::kReset || s == Status::kTimeout || s == Status::kResources)
               ? Status::kPathFailed
               : s;
  }
  void fail(Status s);
  void note_failure(const char* what, const char* detail);

  bool last_send_signalled_ = true;  // our newest send asked for its completion (signal_tail)
  // Our data message in the bounce mirror, counted as sent (its credit taken, our cursor past it) and
  // not posted: writes said more follows. Nothing else of this channel's is posted before it (an end,
  // a ring's adoption) but credit updates, arms and wakeups, which carry no byte of the stream.
  // One data message carries at most 1 GiB (its length travels as the completion's 32-bit byte_len;
  // rings are at most 512 MiB anyway).
  static constexpr uint64_t kMaxMessage = uint64_t{1} << 30;
  // A held message goes once it is this large: the kernel holds a corked segment until it is full;
  // ours may be larger, but a bulk writer that corks gains nothing from a larger one.
  static constexpr uint64_t kHoldLimit = 64 * 1024;
  struct Held {
    uint64_t offset = 0;  // in the peer's current ring
    uint64_t bytes = 0;
    bool due = false;    // to go as soon as the send queue has room (serve())
    int ticks = 0;       // of the path watcher's, seen while held (push_if_aged)
  } held_;
  bool writer_busy_ = false;  // a write() is in progress (writes are not interleaved)
  bool reader_busy_ = false;

  StreamOptions options_;
  // The queue pair and what is per queue pair (stream_link.h), shared by the link's channels; the
  // last channel to go takes it down.
  std::shared_ptr<StreamLink> link_;
  // The link's lock and condition (every member here is used with mu_ held), and this channel's
  // index on the link (attached at construction).
  std::mutex& mu_ = link_->mu();
  std::condition_variable& cv_ = link_->cv();
  uint32_t index_ = link_->attach(this);
  uint32_t peer_index_ = kFirstChannel;  // the peer's index of this channel: what our immediates name
  bool touched_ = false;  // another channel's thread handed us a completion: serve() is due
  bool peer_aborted_ = false;
  bool peer_asked_again_ = false;
  bool release_owed_ = false;  // the peer released: our release answers it
  bool link_open_ = false;     // opened on a live link (no rdma_cm connection of its own)
  int regions_from_pool_ = 0;  // regions_from_pool()
  bool first_bytes_in_open_ = false;  // the client's first bytes went in its open (Pairing)
  enum class OpenState { kNone, kWaiting, kAccepted, kRefused, kFailed };
  OpenState open_state_ = OpenState::kNone;
  int open_slot_ = -1;  // the setup slot our open waits in
  DeclineReason refused_why_ = DeclineReason::kNone;
  uint16_t redirect_port_ = 0;
  ChannelReadiness readiness_;  // who is told of this channel's news
  bool polled_ = false;  // readiness() was called: someone polls, and our sleeps must pass news on
  bool waits_for_send_room_ = false;  // found no room in the link's send queue (send_queue_has_room)
  uint8_t* ring_ = nullptr;  // our receive ring, then our mailbox; registered at iova 0
  ibv_mr* ring_mr_ = nullptr;
  uint8_t* bounce_ = nullptr;  // staging for our outgoing bytes, mirrors the peer's ring offsets
  ibv_mr* bounce_mr_ = nullptr;
  uint64_t ring_size_ = 0;       // our first ring's, which keeps our mailbox after it
  uint64_t peer_ring_size_ = 0;  // the peer's first ring's, mirrored by bounce_
  uint32_t peer_rkey_ = 0;       // of the peer's ring we write into now
  uint32_t peer_mailbox_rkey_ = 0;  // of the peer's first ring, after which its mailbox is
  // Rings that grow and shrink (docs/links.md): the memory beyond ring_ and bounce_.
  RingGrowth rings_;
  uint64_t mailbox_seq_ = 0;
  uint64_t last_mailbox_seq_read_ = 0;
  uint64_t sends_since_keepalive_ = 0;
  Status failure_ = Status::kOk;
  char failure_detail_[128] = "";
  bool disconnect_seen_ = false;
  bool disconnected_ = false;  // we called rdma_disconnect
  bool write_shut_ = false;  // shutdown_write() was called: writes fail from here
  bool read_shut_ = false;   // shutdown_read() was called
  // The peer closed in order and left (its end, then its release or disconnect), and a write came after: kernel
  // TCP takes that write (the peer's host answers it with a reset) and fails every later one with
  // EPIPE, both directions then being over (POLLHUP). The write was taken and dropped here.
  bool wrote_after_peer_left_ = false;
  bool error_pending_ = false;  // that reset's EPIPE, until a write or SO_ERROR takes it (POLLERR meanwhile)
  // The first write after the peer left, taken whole and dropped (wrote_after_peer_left_); false when
  // the peer has not left in order, or a write came after it already.
  bool take_write_after_peer_left(size_t len, size_t* done);
  bool close_owed_ = false;  // our close is still to be posted (no receive credit when asked)
  bool move_owed_ = false;  // our "to TCP" is to be sent (we move, or the peer did)
  bool move_sent_ = false;  // our "to TCP" is sent: our bytes go on on TCP
  bool move_returns_ = false;  // our "to TCP" says that this side asks to return at once
  bool peer_returns_ = false;  // the peer's said so
  TcpTuple tuple_{};
  uint64_t client_nonce_ = 0;
  uint64_t server_nonce_ = 0;
  StreamCounters counters_;
  std::unique_ptr<FlowControl> flow_;
  // The peer's bytes held in ordinary memory, served before the ring: the tail of the TCP connection
  // (set_unread_prefix), then what spill_when_stuck took out of the ring, in the stream's order.
  std::vector<uint8_t> prefix_;
  size_t prefix_pos_ = 0;
  // What a failover needs (docs/protocol.md, "When the RDMA path fails"): our data messages in
  // flight, what of ours is acknowledged, and from where the bounce mirror holds our bytes.
  SentLedger ledger_;
  bool path_failed_ = false;    // the failure was the path's, not the peer's word
  bool left_path_ = false;      // finish_leaving: everything went to TCP
  bool path_given_up_ = false;  // give_up_path: the failover cannot happen; a reset after all
};

}  // namespace tcp2rdma::transport
