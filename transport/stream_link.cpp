// The link under a stream: the queue pair's resources, its queues and its wait sets (stream_link.h).
#include "stream_link.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "os_calls.h"
#include "own_calls.h"
#include "own_descriptors.h"
#include "channel_readiness.h"
#include "page_memory.h"
#include "pin_budget.h"
#include "rdma_stream.h"
#include "wire.h"

namespace tcp2rdma::transport {
namespace {

bool set_nonblocking(int fd) {
  int flags = os().fcntl(fd, F_GETFL);
  return flags >= 0 && os().fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

}  // namespace

Status StreamLink::open_cm_channel() {
  OwnDescriptors window;
  cm_channel_ = rdma_create_event_channel();
  if (cm_channel_ == nullptr) return Status::kNoDevice;
  if ((cm_channel_->fd = window.place(cm_channel_->fd)) < 0) return Status::kDescriptors;
  return Status::kOk;
}

Status StreamLink::create(const StreamOptions& options) {
  if (id_->verbs == nullptr) return Status::kNoDevice;
  device_ = device_context_for(id_->verbs->device);
  if (device_ == nullptr) return Status::kNoDevice;
  ibv_context* context = device_->get();
  send_queue_depth_ = options.send_queue_depth;
  send_log_.assign(static_cast<size_t>(send_queue_depth_) + 1, 0);  // and the drain marker (stop())
  // Without an explicit ack timeout rdma_cm may leave it at 0 (seen with rxe): "never time out", so a
  // crashed peer host would never fail a send, and the keepalive could never notice it.
  uint8_t ack_timeout = options.ack_timeout_log2;
  rdma_set_option(id_, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout, sizeof ack_timeout);
  {
    OwnDescriptors window;
    comp_channel_ = ibv_create_comp_channel(context);
    if (comp_channel_ == nullptr) return Status::kResources;
    if ((comp_channel_->fd = window.place(comp_channel_->fd)) < 0) return Status::kDescriptors;
  }
  // Room for the receives of the channels the link is sized for (link_channels, each its depth and
  // one for its release) and the setup slots, as far as the device allows: a link that is full makes
  // the next stream take a new link. No more than that: the receive and completion queues live in
  // memory the device maps into the process, about 380 bytes a receive on rxe (stream_many in a loop
  // guest: 3 MiB a link of 8192 receives, when 96 channels of depth 4 need 544), and a
  // server with clients in many processes has a link to each. Channels of a deeper rule than the
  // first's may not fit: they take a link of their own.
  ibv_device_attr device{};
  if (ibv_query_device(context, &device) != 0) return Status::kResources;
  int first_quota = options.recv_queue_depth + 1 + static_cast<int>(kSetupSlots);
  // A crowd's link (size_for_crowd) takes twice the full one's, if the options say less.
  int sized_for = std::max(1, int{options.link_channels}) * (options.recv_queue_depth + 1) + static_cast<int>(kSetupSlots);
  int full_link = std::max(crowd_receives_, sized_for);
  receive_capacity_ = std::max(first_quota, std::min({kLinkReceives, full_link, device.max_qp_wr,
                                                     device.max_cqe - options.send_queue_depth - 1}));
  int cq_size = options.send_queue_depth + 1 + receive_capacity_;
  cq_ = ibv_create_cq(context, cq_size, nullptr, comp_channel_, 0);
  if (cq_ == nullptr) return Status::kResources;
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = cq_;
  attr.qp_type = IBV_QPT_RC;
  // One beyond the depth the channels use (send_queue_has_room): the drain marker's, always free.
  attr.cap.max_send_wr = options.send_queue_depth + 1;
  attr.cap.max_recv_wr = receive_capacity_;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = options.inline_threshold;
  // A protection domain of the link's own, not librdmacm's one per device and process: a queue pair
  // can reach only the memory registered in its domain, so a peer can write into this link's rings
  // and mailboxes and nothing else of this process, whatever rkeys it guesses (rkeys are small and
  // sequential on rxe and mlx5; docs/architecture.md, "Security model").
  pd_ = ibv_alloc_pd(context);
  if (pd_ == nullptr) return Status::kResources;
  attr.sq_sig_all = 0;
  qp_ = ibv_create_qp(pd_, &attr);
  if (qp_ == nullptr) {
    // Some devices take no inline data at all: small pieces then go through the bounce buffer.
    attr.cap.max_inline_data = 0;
    if (options.inline_threshold == 0 || (qp_ = ibv_create_qp(pd_, &attr)) == nullptr) return Status::kResources;
  }
  max_inline_ = attr.cap.max_inline_data;
  if (Status s = move_qp(IBV_QPS_INIT); s != Status::kOk) return s;
  mailbox_out_ = allocate_pages(kMailboxSlot * options.send_queue_depth);
  if (mailbox_out_ == nullptr) return Status::kResources;
  mailbox_out_mr_ = ibv_reg_mr(pd_, mailbox_out_, kMailboxSlot * options.send_queue_depth, 0);
  if (mailbox_out_mr_ == nullptr) return registration_failure(errno);
  // Every receive is posted before the peer can send anything: RNR is impossible from the start.
  if (Status s = reserve_receives(first_quota); s != Status::kOk) return s;
  if (options.zcopy_threshold > 0) {
    registrations_ = std::make_unique<RegistrationCache>(pd_, options.registration_cache_entries);
  }
  return create_wait_sets();
}

Status StreamLink::move_qp(ibv_qp_state state) {
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = state;
  // EINVAL: the connection is in no state to move to (a held request whose client gave up and left:
  // the kernel drops the client's rejection of a request not yet accepted, so this is the only sign).
  if (rdma_init_qp_attr(id_, &attr, &mask) != 0) return errno == EINVAL ? Status::kReset : Status::kResources;
  if (state == IBV_QPS_RTR) {
    // The kernel's rdma_ucm sets RoCE-only attribute bits (21-23) for InfiniBand ports too, which the
    // device refuses: masked off there, as librdmacm does for its own queue pairs.
    ibv_port_attr port{};
    if (ibv_query_port(device_->get(), id_->port_num, &port) == 0 && port.link_layer == IBV_LINK_LAYER_INFINIBAND) {
      mask &= ~0xe00000;
    }
  }
  return ibv_modify_qp(qp_, &attr, mask) == 0 ? Status::kOk : Status::kResources;
}

Status StreamLink::ready_to_send() {
  // INIT again first: the route may have changed the attributes of INIT since create() (the P_Key).
  for (ibv_qp_state state : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    if (Status s = move_qp(state); s != Status::kOk) return s;
  }
  return Status::kOk;
}

void StreamLink::disconnect() {
  disconnected_ = true;
  flush_queue_pair();  // what rdma_disconnect does to a queue pair of its own
  rdma_disconnect(id_);
}

Status StreamLink::create_wait_sets() {
  // The channels are drained without blocking by whoever holds the stream's lock.
  if (!set_nonblocking(comp_channel_->fd)) return Status::kResources;
  {
    OwnDescriptors window;
    kick_fd_ = window.place(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    epoll_fd_ = window.place(os().epoll_create1(EPOLL_CLOEXEC));
  }
  if (kick_fd_ < 0 || epoll_fd_ < 0) return Status::kDescriptors;
  if (!watch_readable(epoll_fd_, comp_channel_->fd) || !watch_readable(epoll_fd_, kick_fd_)) return Status::kResources;
  return Status::kOk;
}

Status StreamLink::watch_cm_channel() {
  if (!set_nonblocking(cm_channel_->fd)) return Status::kResources;
  if (!watch_readable(epoll_fd_, cm_channel_->fd)) return Status::kResources;
  cm_watched_ = true;
  cq_armed_ = false;
  return Status::kOk;
}

uint32_t StreamLink::attach(RdmaStream* channel) {
  if (channels_.empty()) {  // kLinkChannel
    channels_.push_back(nullptr);
    retired_.emplace_back();
    sends_by_channel_.push_back(0);
  }
  for (uint32_t i = kFirstChannel; i < channels_.size(); ++i) {
    if (channels_[i] == nullptr && !retired_[i].has_value()) {
      channels_[i] = channel;
      ++live_channels_;
      return i;
    }
  }
  if (channels_.size() >= kMaxChannels) return kLinkChannel;  // full: the caller takes another link
  channels_.push_back(channel);
  retired_.emplace_back();
  sends_by_channel_.push_back(0);
  ++live_channels_;
  return static_cast<uint32_t>(channels_.size() - 1);
}

size_t StreamLink::attached() const { return live_channels_; }

void StreamLink::retire(uint32_t index, const Retired& leftovers) {
  if (index == kLinkChannel || index >= channels_.size()) return;
  if (channels_[index] != nullptr) --live_channels_;
  channels_[index] = nullptr;
  retired_[index] = leftovers;
  free_retired_if_done(index);
}

void StreamLink::on_retired_message(uint32_t index, bool release) {
  if (release && is_retired(index)) {
    retired_[index]->peer_released = true;
    free_retired_if_done(index);
  }
}

void StreamLink::on_channel_send_posted(uint32_t index) {
  if (index < sends_by_channel_.size()) ++sends_by_channel_[index];
}

void StreamLink::on_channel_send_completed(uint32_t index) {
  if (index < sends_by_channel_.size() && sends_by_channel_[index] > 0) --sends_by_channel_[index];
  if (is_retired(index)) free_retired_if_done(index);
}

void StreamLink::free_region(Region& region) {
  if (region.mr != nullptr) ibv_dereg_mr(region.mr);
  free_pages(region.memory);
  region = Region{};
}

void StreamLink::release(Retired& r) {
  free_region(r.ring);
  free_region(r.bounce);
  for (Region& region : r.grown) free_region(region);
  r = Retired{};
}

void StreamLink::recycle(Retired& r) {
  // A full list gives its oldest up for the newest: sizes change (a crowded process's rings, a peer's),
  // and spares nobody takes any more must not hold the places for good.
  Region evicted[2];
  if (!stopped_ && pin_room_for_spares()) {
    std::lock_guard lock(spares_mu_);
    int i = 0;
    for (auto [region, spares] : {std::pair{&r.ring, &spare_rings_}, std::pair{&r.bounce, &spare_mirrors_}}) {
      Region& out = evicted[i++];
      if (region->mr == nullptr) continue;
      if (spares->size() >= kSpares) {
        out = spares->front();
        spares->erase(spares->begin());
      }
      spares->push_back(*region);
      *region = Region{};
    }
  }
  for (Region& region : evicted) free_region(region);  // outside the leaf lock
  release(r);
}

StreamLink::Region StreamLink::take_spare(uint64_t length, bool ring) {
  Region found;
  {
    std::lock_guard lock(spares_mu_);
    std::vector<Region>& spares = ring ? spare_rings_ : spare_mirrors_;
    auto it = std::find_if(spares.begin(), spares.end(), [&](const Region& r) { return r.mr->length == length; });
    if (it == spares.end()) return found;
    found = *it;
    spares.erase(it);
  }
  // Nothing of the channel before is left in it: the peer's bytes in a ring, ours in a mirror.
  std::memset(found.memory, 0, (length + kPageSize - 1) & ~(kPageSize - 1));
  return found;
}

void StreamLink::free_retired_if_done(uint32_t index) {
  // The peer writes nothing more into the ring (its release came), and the adapter reads nothing
  // more of the bounce buffer (every send completed): the memory can go, and the index be reused.
  Retired& r = *retired_[index];
  if (!r.peer_released || sends_by_channel_[index] > 0) return;
  if (r.ring.memory != nullptr && r.ring.memory == setup_owner_) {
    // The link's setup area is in this ring's registration: it stays until the link ends.
    setup_owner_mr_ = r.ring.mr;
    r.ring = Region{};
  }
  unreserve_receives(r.receives);
  recycle(r);
  retired_[index].reset();
}

Status StreamLink::reserve_receives(int receives) {
  // The channel is attached by now (counted): only its receives are asked for here.
  if (!receives_fit(receives)) return Status::kResources;
  receives_reserved_ += receives;
  while (receives_posted_ < receives_reserved_) {
    if (Status s = post_receive(); s != Status::kOk) return s;
    ++receives_posted_;
  }
  return Status::kOk;
}

Status StreamLink::post_setup_record(const void* record, uint32_t op, uint32_t slot) {
  uint8_t* source = next_mailbox_slot();  // 96 bytes, registered: what the adapter reads from
  std::memcpy(source, record, kSetupRecord);
  ibv_sge sge{reinterpret_cast<uint64_t>(source), kSetupRecord, mailbox_out_mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = work_id(kLinkChannel, kWrSignal);
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.imm_data = htonl(encode_imm(MessageType::kEnd, kLinkChannel, link_imm_arg(op, slot)));
  wr.wr.rdma.remote_addr = setup_.peer_slot_offset(slot);
  wr.wr.rdma.rkey = setup_.peer_rkey();
  return send_queue_has_room(1) && post_send(&wr) == 0 ? Status::kOk : Status::kResources;
}

int StreamLink::post_send(ibv_send_wr* wr) {
  if (unsignalled_run_ + 1 >= std::min(kSignalEvery, send_queue_depth_)) wr->send_flags |= IBV_SEND_SIGNALED;
  // The send's place in the order rides in its wr_id, for take_older_send (the low 32 bits of the
  // count: at most send_queue_depth_ sends are outstanding, so they tell them apart).
  wr->wr_id = (wr->wr_id & 0xffffffff) | next_send_ << 32;
  ibv_send_wr* bad = nullptr;
  int e = ibv_post_send(qp_, wr, &bad);
  if (e != 0) return e;
  send_log_[next_send_ % send_log_.size()] = wr->wr_id;
  ++next_send_;
  ++sends_outstanding_;
  unsignalled_run_ = (wr->send_flags & IBV_SEND_SIGNALED) != 0 ? 0 : unsignalled_run_ + 1;
  return 0;
}

bool StreamLink::take_older_send(uint64_t wr_id, uint64_t* older) {
  // Our own wr_ids, in our own order: nothing here comes from the peer. A completion of a send no
  // longer logged (none is expected) takes nothing.
  if (oldest_send_ == next_send_) return false;
  uint64_t oldest = send_log_[oldest_send_ % send_log_.size()];
  if ((oldest >> 32) == (wr_id >> 32)) {
    ++oldest_send_;
    return false;
  }
  if (((wr_id >> 32) - (oldest_send_ & 0xffffffff)) & 0x80000000) return false;  // before the oldest: not ours to take
  ++oldest_send_;
  *older = oldest;
  return true;
}

bool StreamLink::take_older_completion(const ibv_wc& wc, ibv_wc* done) {
  uint64_t older = 0;
  if (!take_older_send(wc.wr_id, &older)) return false;
  *done = ibv_wc{};
  done->wr_id = older;
  done->status = IBV_WC_SUCCESS;
  done->opcode = IBV_WC_RDMA_WRITE;
  done->qp_num = wc.qp_num;
  return true;
}

Status StreamLink::post_receive() {
  ibv_recv_wr wr{}, *bad = nullptr;  // no buffer: every message is an RDMA Write with immediate
  wr.wr_id = kWrReceive;
  return ibv_post_recv(qp_, &wr, &bad) == 0 ? Status::kOk : Status::kResources;
}

Status StreamLink::arm_and_poll(ibv_wc* wc, bool* got) {
  *got = false;
  if (!cq_armed_) {
    if (ibv_req_notify_cq(cq_, 0) != 0) return Status::kReset;
    cq_armed_ = true;
    event_due_ = true;
  }
  int n = ibv_poll_cq(cq_, 1, wc);
  if (n < 0) return Status::kReset;
  *got = n == 1;
  return Status::kOk;
}

StreamLink::CmNews StreamLink::take_cm_events() {
  CmNews news;
  rdma_cm_event* event = nullptr;
  while (rdma_get_cm_event(cm_channel_, &event) == 0) {
    rdma_cm_event_type type = event->event;
    rdma_ack_cm_event(event);
    if (type == RDMA_CM_EVENT_ESTABLISHED) established_ = true;
    if (type == RDMA_CM_EVENT_CONNECT_ERROR || type == RDMA_CM_EVENT_UNREACHABLE || type == RDMA_CM_EVENT_REJECTED) {
      setup_failed_ = true;
    }
    if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL ||
        type == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
      news.disconnected = true;
    }
    if (type == RDMA_CM_EVENT_DEVICE_REMOVAL) news.device_removed = true;
  }
  if (news.disconnected) disconnected_ = true;
  return news;
}

bool StreamLink::take_channel_events() {
  // eventfd_read and eventfd_write are libc's own calls, never the module's wrappers (own_calls.h).
  // Read only after a kick: kick() writes before it sets the flag, so a read never misses a kick
  // whose flag it took (one whose flag comes a moment later is read by the next take; the sleeper it
  // wakes meanwhile finds its event and looks again).
  take_kicks();
  // Not armed since the last event was taken: none can be there, and the read would only say so.
  if (!event_due_) return false;
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  // One read: an event comes of an arming, and the queue is armed again only after its event was
  // taken (cq_armed_, under the link's lock), so a second read would find nothing. (Should one ever
  // be left, the channel stays readable and the next sleep or take reads it.)
  if (ibv_get_cq_event(comp_channel_, &cq, &context) != 0) return false;
  ibv_ack_cq_events(cq_, 1);
  cq_armed_ = false;
  event_due_ = false;
  return true;
}

void StreamLink::take_kicks() {
  eventfd_t kicks = 0;
  if (kicked_.exchange(false, std::memory_order_acq_rel)) (void)eventfd_read(kick_fd_, &kicks);
}

int StreamLink::sleep(int ms) {
  epoll_event ev[3];
  return os().epoll_wait(epoll_fd_, ev, 3, ms);
}

void StreamLink::kick() {
  (void)eventfd_write(kick_fd_, 1);
  kicked_.store(true, std::memory_order_release);
}

void StreamLink::stop() {
  stopped_ = true;
  flush_queue_pair();
  post_drain_marker();
}

void StreamLink::post_drain_marker() {
  if (qp_ == nullptr) return;
  // A zero-length RDMA Write: flushed, it never leaves; were the queue pair somehow not in the error
  // state, it would touch no memory and consume no receive of the peer's.
  ibv_send_wr wr{};
  wr.wr_id = work_id(kLinkChannel, kWrDrain);
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  (void)post_send(&wr);  // not posted (no room after all): the drain waits as long as it may
}

void StreamLink::flush_queue_pair() {
  if (qp_ == nullptr) return;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(qp_, &attr, IBV_QP_STATE);
}

void StreamLink::destroy_queue_pair() {
  if (qp_ != nullptr) ibv_destroy_qp(std::exchange(qp_, nullptr));
}

StreamLink::~StreamLink() {
  // Every descriptor closed here (the channels' of libibverbs and librdmacm, our sets and eventfds)
  // is the module's own: the close is no application's, whichever thread lets go of the link last
  // (an event loop's epoll_wait holds the epoll bookkeeping's lock when its reference goes, and the
  // application's close would take that lock again).
  OwnCalls own;  // own_calls.h
  // The peer learns that the link is gone (its channels, if any are left, read it as a disconnect).
  if (id_ != nullptr && qp_ != nullptr && !disconnected_ && !stopped_) disconnect();
  destroy_queue_pair();
  if (setup_owner_mr_ != nullptr) {
    ibv_dereg_mr(setup_owner_mr_);
    free_pages(setup_owner_);
  }
  for (std::optional<Retired>& r : retired_) {
    if (r.has_value()) release(*r);
  }
  for (Region& region : spare_rings_) free_region(region);
  for (Region& region : spare_mirrors_) free_region(region);
  registrations_.reset();
  if (mailbox_out_mr_ != nullptr) ibv_dereg_mr(mailbox_out_mr_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);  // after its queue pair and every registration in it
  if (cq_ != nullptr) ibv_destroy_cq(cq_);  // every event taken from the channel was acknowledged at once
  if (comp_channel_ != nullptr) ibv_destroy_comp_channel(comp_channel_);
  if (id_ != nullptr) rdma_destroy_id(id_);
  if (cm_channel_ != nullptr) rdma_destroy_event_channel(cm_channel_);
  for (int fd : {epoll_fd_, kick_fd_}) {
    if (fd >= 0) os().close(fd);
  }
  free_pages(mailbox_out_);
}

}  // namespace tcp2rdma::transport
