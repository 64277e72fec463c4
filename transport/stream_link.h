// The link under a stream: what belongs to the RC queue pair rather than to the byte stream it
// carries (docs/links.md). The rdma_cm id and its event channel, the completion queue and its channel,
// the protection domain, the receive queue, the send queue's occupancy, the slots outgoing mailbox
// updates are written from, the registration cache of zero-copy writes (a registration belongs to a
// protection domain), the descriptor sets its threads and the application's pollers wait on, the
// lock, and the table of the channels (streams) it carries, by which each completion finds its own.
//
// One lock for the link and all its channels: every channel's state and every call here is used with
// mu() held. A completion taken by any channel's thread is handed to the channel it names (the wr_id
// of a send, the immediate of a receive): see RdmaStream::progress.
#pragma once

#include <rdma/rdma_cma.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "channel_queue.h"
#include "device_context.h"
#include "link_setup.h"
#include "registration_cache.h"
#include "status.h"
#include "wire.h"

namespace tcp2rdma::transport {

struct StreamOptions;

// Whether a spin on a link gives the CPU away between its polls (sched_yield).
enum class SpinYield : uint8_t {
  kSoftwareDevice,  // only on a device whose work runs on this host's CPUs (DeviceContext::software)
  kAlways,
  kNever,
};
class RdmaStream;

class StreamLink {
 public:
  // What a send completion was for (its wr_id). A receive's is kWrReceive: an error completion's
  // opcode is not valid, its wr_id is (ibv_poll_cq(3)).
  // A send's wr_id is its kind and its channel's index (work_id); every receive's is kWrReceive (its
  // channel is named by the immediate of the message that consumes it).
  static constexpr uint64_t kWrSignal = 0;  // mailbox update, wakeup, arm, end, keepalive
  static constexpr uint64_t kWrCopy = 1;    // data from the bounce buffer, or inline
  static constexpr uint64_t kWrZeroCopy = 2;
  static constexpr uint64_t kWrReceive = 3;
  // The marker stop() posts once the queue pair is in the error state, signalled: its flushed
  // completion comes after every send posted before it, so the unsignalled sends that had completed
  // without one are counted off behind it (take_older_send). Without it a link whose last sends all
  // succeeded unsignalled never sees its count of sends outstanding reach zero after a failure, and
  // drain_after_failure waits out the stream's whole timeout. Its slot is the send queue's one
  // beyond send_queue_depth (create()).
  static constexpr uint64_t kWrDrain = 4;
  // post_send adds the send's place in the link's order of sends (its low 32 bits) above both.
  static constexpr uint64_t work_id(uint32_t channel, uint64_t kind) { return uint64_t{channel} << 8 | kind; }
  static constexpr uint64_t work_kind(uint64_t wr_id) { return wr_id & 0xff; }
  static constexpr uint32_t work_channel(uint64_t wr_id) { return static_cast<uint32_t>(wr_id >> 8) & 0xffffff; }
  // Each outgoing mailbox update is written from a slot of its own, so that an update still being
  // read by the adapter is never overwritten by the next.
  static constexpr size_t kMailboxSlot = 96;  // a MailboxRecord (wire.h: 88 bytes), rounded up to 32
  // Receives a link's queue holds at most (the device may allow fewer; rxe allows 16384): a link is
  // made with room for its options' link_channels channels of its first channel's depth (create()),
  // and its receives are all the bound there is on its channels. (No channel has a readiness set of its
  // own nested in the application's epoll sets, so the kernel's limit on the wakeup paths to one file
  // through nested sets does not bound a link: docs/links.md, "Readiness per link".)
  static constexpr int kLinkReceives = 16384;

  StreamLink() = default;
  // Destroys the queue pair first (see destroy_queue_pair), then everything else.
  ~StreamLink();
  StreamLink(const StreamLink&) = delete;
  StreamLink& operator=(const StreamLink&) = delete;

  // A new rdma_cm event channel of the link's own, its descriptor above the application's range
  // (own_descriptors.h). kNoDevice when librdmacm has none to give.
  Status open_cm_channel();
  rdma_event_channel* cm_channel() const { return cm_channel_; }
  // The rdma_cm id whose connection the link is: the client's (made on cm_channel) or a request the
  // listener migrated to cm_channel. The link destroys it.
  void adopt_id(rdma_cm_id* id) { id_ = id; }
  rdma_cm_id* id() const { return id_; }

  // Makes the completion channel and queue, the protection domain, the queue pair, the mailbox slots,
  // the registration cache (when zero-copy is on), posts every receive (so RNR is impossible from the
  // start), and the wait sets. All in a device context of this epoch (device_context.h), not in
  // librdmacm's id->verbs; the queue pair is left in the INIT state.
  Status create(const StreamOptions& options);
  // The queue pair from INIT to ready to receive and to send, with the attributes rdma_cm computed
  // for the connection (rdma_init_qp_attr): the server's before its accept, the client's when the
  // server's response came (then rdma_establish tells the server). rdma_cm moves a queue pair of its
  // own itself; ours lives in another context than the id's, so it is ours to move.
  Status ready_to_send();
  uint32_t qp_num() const { return qp_->qp_num; }
  void mark_established() { established_ = true; }
  // Before create(): the link is made because another link to (or from) the same peer, of
  // `full_receives` receives, is full: its receive queue takes twice that (as far as the device
  // allows, kLinkReceives at most) if the options' link_channels say less. A process with thousands
  // of connections to a peer gets a few large links (the default's 12448 receives, then 16384), while
  // a server with clients in many processes pays for a link of the options' size each.
  void size_for_crowd(int full_receives) { crowd_receives_ = 2 * full_receives; }
  int receive_capacity() const { return receive_capacity_; }
  // Whether a channel whose rule says `depth` finds no room here, the link being live otherwise
  // (a full link: the next one to its peer is sized for a crowd).
  bool live_but_full(int depth) const {
    return !stopped() && !disconnected() && !has_room_for(channel_depth(depth) + 1);
  }
  // Once the cm channel carries only this connection's events (the client's from the start, the
  // server's after the accept): its events wake the link's sleeper, and its channels' pollers (each
  // channel adds cm_fd() to its own readiness set).
  Status watch_cm_channel();
  bool cm_watched() const { return cm_watched_.load(std::memory_order_acquire); }
  int cm_fd() const { return cm_channel_->fd; }
  int completion_fd() const { return comp_channel_->fd; }

  // The lock of the link and of its channels, and the condition its channels' threads wait on.
  std::mutex& mu() { return mu_; }
  std::condition_variable& cv() { return cv_; }

  // Who waits on the link (LinkProgress::wait, under mu()): one thread at a time sleeps on its
  // events, the sleeper; the others wait on cv(), and the sleeper wakes them after its progress.
  // Wakes the sleeper, if there is one, after another thread changed what it may be waiting for.
  void wake_sleeper() {
    if (sleeper_) kick();
  }
  // Arming the queue is one system call on Soft-RoCE, and taking its event another: an event loop whose
  // replies come while it polls should pay neither (docs/protocol.md, "Polling before sleeping"). So the
  // queue is armed by whoever is about to sleep on its event, not by whoever took the last one, unless
  // someone else relies on it. Event sleepers: threads asleep (or about to be) on the event besides
  // the link's sleeper, each having armed the queue first: the module's epoll waits and its poll and select
  // calls (StreamSleeper). Eager: someone outside the module's waits may sleep on it (an epoll set a
  // poller watches, a wait that began before the link's record joined its set): every take arms the
  // queue again and every call that would block arms it, for good.
  void count_event_sleeper(int change) { event_sleepers_ += change; }
  bool eager() const { return eager_; }
  bool make_eager() { return !std::exchange(eager_, true); }  // true the first time: the caller arms
  bool relied_on() const { return eager_ || sleeper_ || event_sleepers_ > 0; }
  // The longest busy_poll_us among its channels' options: how long an event loop that holds the link
  // polls its queue before it sleeps (epoll_wait.cpp), and whether every one of them says adaptive
  // (*adaptive is cleared when one does not); and whether a spin gives the CPU away between polls:
  // when a channel's options say always, or say so for a software device and the link's is one.
  // Noted once the link has its device (create()); read without the lock.
  void note_busy_poll(int us, bool adaptive, SpinYield yield) {
    int now = busy_poll_us_.load(std::memory_order_relaxed);
    while (us > now && !busy_poll_us_.compare_exchange_weak(now, us, std::memory_order_relaxed)) {
    }
    if (!adaptive) busy_poll_adaptive_.store(false, std::memory_order_relaxed);
    if (yield == SpinYield::kAlways || (yield == SpinYield::kSoftwareDevice && device_->software())) {
      spin_yields_.store(true, std::memory_order_relaxed);
    }
  }
  int busy_poll_us(bool* adaptive) const {
    if (!busy_poll_adaptive_.load(std::memory_order_relaxed)) *adaptive = false;
    return busy_poll_us_.load(std::memory_order_relaxed);
  }
  bool spin_yields() const { return spin_yields_.load(std::memory_order_relaxed); }
  // Channels with news another channel's thread handed them (LinkProgress::serve_touched serves these), and
  // channels that left something undone for want of room in the send queue (touch_room_waiters).
  void note_touched(uint32_t channel) { touched_.add(channel); }
  void note_waits_for_room(uint32_t channel) { room_waiters_.add(channel); }
  // The channels so noted, in order, each once; taken (`out` holds them, the link none).
  void take_touched(std::vector<uint32_t>& out) { touched_.take(out); }
  void take_room_waiters(std::vector<uint32_t>& out) { room_waiters_.take(out); }
  bool any_touched() const { return !touched_.empty(); }
  bool any_waits_for_room() const { return !room_waiters_.empty(); }

  // The channels: attach gives a channel its index (kFirstChannel for the first). A channel that goes
  // leaves its memory to the link (retire): the peer may write into it until its release arrives.
  uint32_t attach(RdmaStream* channel);
  // The channel with `index`, or nullptr (none, retired, or a peer's lie).
  RdmaStream* channel(uint32_t index) const {
    return index < channels_.size() ? channels_[index] : nullptr;
  }
  const std::vector<RdmaStream*>& channels() const { return channels_; }
  size_t attached() const;  // channels in use, retired ones not counted
  // What a departing channel leaves: its registrations (ring and mailbox, bounce buffer), the pages
  // under them, and its receive quota. Freed once the peer released the channel and every send of
  // ours on it completed; then the index is free again.
  // A registration and the pages under it (freed with std::free).
  struct Region {
    uint8_t* memory = nullptr;
    ibv_mr* mr = nullptr;
  };
  struct Retired {
    Region ring;    // the first ring, with the mailbox (and perhaps the link's setup area) after it
    Region bounce;  // the first mirror
    // Grown rings and mirrors (docs/links.md, "Rings that grow and shrink"): the ring in use and one
    // offered, the mirror in use and the one before the last move.
    std::array<Region, 4> grown{};
    int receives = 0;
    bool peer_released = false;
  };
  void retire(uint32_t index, const Retired& leftovers);
  static void release(Retired& r);  // deregisters and frees what it holds
  static void free_region(Region& region);  // deregisters and frees one registration, leaves it empty

  // The link's pool (docs/links.md, "A link's pool"): the registered first rings and mirrors of its
  // finished channels, kept for its next channels, so that a short connection on a live link makes
  // no ibv_reg_mr or ibv_dereg_mr (100-300 us each on the emulated testbed, a tenth of a setup; more
  // than a round trip on a real NIC). At most kSpares of each kind, kept only while the process is
  // not crowded (pin_room_for_spares): pinned memory still follows the connections. A spare is
  // registered in this link's protection domain, so only this link's peer ever reaches it, as before.
  static constexpr size_t kSpares = 2;
  // A spare ring (`ring`: registered for the peer to write, its mailbox after it) or mirror registered
  // for exactly `length` bytes, zeroed as fresh pages are (page_memory.h); empty when there is none.
  Region take_spare(uint64_t length, bool ring);
  bool is_retired(uint32_t index) const { return index < retired_.size() && retired_[index].has_value(); }
  // A message for a retired channel: taken and ignored; a release frees it when nothing is left.
  void on_retired_message(uint32_t index, bool release);
  // Sends of each channel not yet completed (a retired channel's memory waits for them).
  void on_channel_send_posted(uint32_t index);
  void on_channel_send_completed(uint32_t index);
  int sends_of(uint32_t index) const { return index < sends_by_channel_.size() ? sends_by_channel_[index] : 0; }

  // Receives: the queue holds what every channel's quota (its depth and one for its release) and the
  // link's setup slots need; posted once, reposted as they are consumed. A new channel on the link
  // needs room for its quota (has_room_for); reserve_receives posts it.
  // Asked before a new channel attaches: a channel more, and its quota.
  bool has_room_for(int receives) const { return receives_fit(receives); }
  // The depth (receive quota less one) of a new channel whose rule says `wanted`: `wanted` while the
  // link carries fewer than kDeepChannels channels, then kShallowDepth. A link's receives are all the
  // bound on its channels and cannot grow after it is made: a link of the default size (96 channels
  // of the default depth, 128: 12448 receives) carried 96 connections, and 10 000 took 105 queue
  // pairs; with only the first 16 deep the same receives carry 2080, and a crowd's link of 16384
  // (size_for_crowd) 2867 (docs/links.md, "Messages on a link"). The deep ones keep the rule's
  // depth for the few bulk connections most programs make to a peer; among thousands, messages in
  // flight per connection matter less than the connection being on RDMA at all. Each side chooses
  // its own and tells the other in the open or answer, as before.
  static constexpr int kDeepChannels = 16;
  static constexpr int kShallowDepth = 4;
  int channel_depth(int wanted) const {
    return attached() < kDeepChannels ? wanted : std::min(wanted, kShallowDepth);
  }
  bool receives_fit(int receives) const { return receives_reserved_ + receives <= receive_capacity_; }
  Status reserve_receives(int receives);
  void unreserve_receives(int receives) { receives_reserved_ -= receives; }

  // The setup area (wire.h, kSetupArea) after the first channel's mailbox, and the peer's: the
  // channels' opens and answers (link_setup.h). `owner` is the first channel's ring allocation that
  // holds our area: kept (registered) until the link ends, even after that channel goes.
  void set_setup_areas(void* owner, uint8_t* ours, uint32_t peer_rkey, uint64_t peer_offset) {
    setup_owner_ = owner;
    setup_.set_areas(ours, peer_rkey, peer_offset);
  }
  LinkSetup& setup() { return setup_; }
  const LinkSetup& setup() const { return setup_; }
  // Writes a setup record into the peer's slot, with the link message `op` (wire.h).
  Status post_setup_record(const void* record, uint32_t op, uint32_t slot);

  ibv_pd* pd() const { return pd_; }
  uint32_t max_inline() const { return max_inline_; }
  RegistrationCache* registrations() const { return registrations_.get(); }
  // The slot the next outgoing mailbox update is written from. Slots go round in posting order: a slot
  // comes back after send_queue_depth more updates were posted, and by then the one that used it has
  // completed (sends complete in order, and no more than send_queue_depth are outstanding).
  uint8_t* next_mailbox_slot() { return mailbox_out_ + (mailbox_updates_++ % send_queue_depth_) * kMailboxSlot; }
  uint32_t mailbox_lkey() const { return mailbox_out_mr_->lkey; }

  // The queues. post_send returns ibv_post_send's error (0: posted); a posted send counts until
  // on_send_completed. Not every send is signalled: RC completes sends in the order they were posted,
  // so the completion of a signalled one tells that every send before it completed too, and a
  // successful send needs no completion of its own unless its caller waits for it (a zero-copy
  // write's buffer, an end, a keepalive: the caller sets IBV_SEND_SIGNALED). post_send signals every
  // kSignalEvery-th send besides, so that a full queue always has a completion on the way. A reply
  // sent from an event loop then raises no completion that would wake the loop again for nothing,
  // and a failed send raises one whether signalled or not (the adapter reports every error).
  static constexpr int kSignalEvery = 16;
  int post_send(ibv_send_wr* wr);
  // A send's completion (signalled, or failed) completes the unsignalled sends posted before it,
  // oldest first: each call takes the oldest still logged off the log; true with its wr_id in
  // *older while it is one before `wr_id`, false once it was `wr_id`'s own.
  bool take_older_send(uint64_t wr_id, uint64_t* older);
  // The same for the completion `wc`: each older send as the successful completion it would have
  // raised, in *done (for every taker of completions: dispatch, and a failed link's drain).
  bool take_older_completion(const ibv_wc& wc, ibv_wc* done);
  Status post_receive();
  bool send_queue_has_room(int n) const { return sends_outstanding_ + n <= send_queue_depth_; }
  int sends_outstanding() const { return sends_outstanding_; }
  void on_send_completed() { --sends_outstanding_; }
  int poll(ibv_wc* wcs, int n) { return ibv_poll_cq(cq_, n, wcs); }
  // Armed, or its event raised and not taken yet: a sleeper on the completion channel wakes at the
  // next completion (or at once).
  bool armed() const { return cq_armed_; }

  // Connection events, taken without waiting.
  struct CmNews {
    bool disconnected = false;    // disconnected, the device removed, or the time-wait over
    bool device_removed = false;
  };
  // Takes the link's connection events, whoever calls it (a channel's thread, the listener's), with
  // the link's lock held; the establishment of a server's link is one of them, remembered for its
  // accept (established()).
  CmNews take_cm_events();
  // The server's side of a link: the client completed the connection (an ESTABLISHED event came), or
  // it never will (a connection error, a rejection, a disconnect).
  bool established() const { return established_; }
  bool setup_failed() const { return setup_failed_; }
  // A poll or select call's sleep saw the completion channel or the connection events readable
  // (StreamSleeper): its next look takes them (LinkProgress::take_events). A look that saw nothing
  // leaves them, since the read (and librdmacm's command write) would only find nothing: two system
  // calls a look for the threads of one link that poll their own connections (memcslap's eight).
  // Set without the lock; taken, under it, before the events are, so that a later event's mark is
  // never lost.
  void note_fired(bool completions, bool cm) {
    if (completions) completions_fired_.store(true, std::memory_order_release);
    if (cm) cm_fired_.store(true, std::memory_order_release);
  }

  // The queue pair to the error state for good: the adapter flushes every work request with a
  // completion, and no receive is reposted from here (stopped()); then the drain marker (kWrDrain).
  void stop();
  bool stopped() const { return stopped_; }
  void disconnect();
  // We disconnected, or the peer did (a connection event seen): no channel can be opened on it.
  bool disconnected() const { return disconnected_; }
  // Teardown order: no work request may touch a buffer after it is deregistered, so the queue pair
  // goes before any registration of the stream's (its ring and bounce buffer, in pd()).
  void destroy_queue_pair();

 private:
  // The link's progress (link_progress.h) is the one to wait on the link, arm its queue and take its
  // events, and to count what it hands out.
  friend class LinkProgress;
  // Arms the completion channel (if it is not) and polls once more: a completion that came in between
  // would otherwise raise no event. *got says whether *wc holds one. kReset when the CQ fails.
  Status arm_and_poll(ibv_wc* wc, bool* got);
  bool take_completions_fired() { return completions_fired_.exchange(false, std::memory_order_acq_rel); }
  bool take_cm_fired() { return cm_fired_.exchange(false, std::memory_order_acq_rel); }
  // Takes the completion channel's events (and acknowledges them) and the kicks; the channel is
  // disarmed if there were any. Returns whether there were completion events.
  bool take_channel_events();
  void take_kicks();  // the kicks alone (take_channel_events' first step)
  // Wakes the thread asleep on the link's set (the sleeper's wait in LinkProgress::wait).
  void kick();
  // The channels' threads sleep on the link's set (completions, connection events, kicks); the
  // application's pollers watch each channel's own (channel_readiness.h), so that neither takes the
  // other's news. Sleeps up to ms (-1: for ever) on the link's set; epoll_wait's result, errno kept.
  int sleep(int ms);

  Status create_wait_sets();
  Status move_qp(ibv_qp_state state);  // to `state`, with rdma_cm's attributes for it
  void flush_queue_pair();  // to the error state: every work request completes, flushed
  void post_drain_marker();

  std::mutex mu_;
  std::condition_variable cv_;
  bool sleeper_ = false;   // a thread sleeps on the link's set
  bool spinning_ = false;  // a thread busy-polls the queue: one at a time
  // Completions handed out so far (LinkProgress::dispatch). Two threads of one channel (its reader and
  // its writer) each take the other's completions: a thread about to wait notes this first, and its
  // spin, and its sleep, end once it grew, so that it looks at what another thread took for it.
  uint64_t dispatched_ = 0;
  int event_sleepers_ = 0;
  bool eager_ = false;
  std::atomic<int> busy_poll_us_{0};
  std::atomic<bool> busy_poll_adaptive_{true};
  std::atomic<bool> spin_yields_{false};
  ChannelQueue touched_;
  ChannelQueue room_waiters_;
  static_assert(kSetupRecord <= kMailboxSlot, "a setup record (wire.h) is sent from a mailbox slot");
  std::vector<RdmaStream*> channels_;  // by index; [kLinkChannel] is always empty
  std::vector<std::optional<Retired>> retired_;  // by index
  std::vector<int> sends_by_channel_;  // by index
  void free_retired_if_done(uint32_t index);
  // Keeps the retired channel's first ring and mirror as spares when there is room for them, then
  // deregisters and frees the rest.
  void recycle(Retired& r);
  std::mutex spares_mu_;  // a leaf lock: taken alone, and nothing is called while it is held
  std::vector<Region> spare_rings_, spare_mirrors_;  // with spares_mu_
  int receive_capacity_ = 0;
  int crowd_receives_ = 0;
  size_t live_channels_ = 0;  // attached and not retired (attached())
  int receives_reserved_ = 0;
  int receives_posted_ = 0;
  LinkSetup setup_;
  void* setup_owner_ = nullptr;
  ibv_mr* setup_owner_mr_ = nullptr;  // set when the first channel went: freed with the link
  uint64_t mailbox_updates_ = 0;
  rdma_event_channel* cm_channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  std::shared_ptr<DeviceContext> device_;  // the context everything below lives in
  ibv_qp* qp_ = nullptr;
  ibv_comp_channel* comp_channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_pd* pd_ = nullptr;  // the link's own protection domain: its queue pair reaches only its memory
  bool cq_armed_ = false;
  bool event_due_ = false;  // armed since the last event was taken: its event may be in the channel
  bool stopped_ = false;
  uint32_t max_inline_ = 0;
  int send_queue_depth_ = 0;
  int sends_outstanding_ = 0;
  // The wr_ids of the sends posted and not yet completed, in posting order (a circle of
  // send_queue_depth_): positions count every send posted (next) and taken off (oldest).
  std::vector<uint64_t> send_log_;
  uint64_t next_send_ = 0;
  uint64_t oldest_send_ = 0;
  int unsignalled_run_ = 0;  // unsignalled sends posted since the last signalled one
  uint8_t* mailbox_out_ = nullptr;  // one slot per send work request
  ibv_mr* mailbox_out_mr_ = nullptr;
  std::unique_ptr<RegistrationCache> registrations_;
  int epoll_fd_ = -1;  // comp channel, cm channel, kick_fd_: what the channels' threads sleep on
  int kick_fd_ = -1;   // eventfd: wakes the sleeping thread when another one changed the state
  // Set after a kick's write, taken before its read: a take without a kick since makes no call.
  std::atomic<bool> kicked_{false};
  std::atomic<bool> cm_watched_{false};  // read without the lock by a poller's watch (link_watch.h)
  std::atomic<bool> completions_fired_{true};  // note_fired
  std::atomic<bool> cm_fired_{true};
  bool disconnected_ = false;
  bool established_ = false;
  bool setup_failed_ = false;
};

}  // namespace tcp2rdma::transport
