// Channels on a live link (docs/links.md, "Opening a channel on a live link"): the client writes a
// ChannelOpen into a slot of the server's setup area; the server's listener holds it as it holds an
// rdma_cm request (same hold, same proof against the link's addresses) and answers in the client's
// slot with a ChannelAnswer. No rdma_cm, no queue pair, no thread: one round trip on the link.
#include <arpa/inet.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cstring>

#include "own_calls.h"
#include "page_memory.h"
#include "rdma_stream.h"
#include "stream_listener.h"

namespace tcp2rdma::transport {
namespace {


}  // namespace

bool valid_open(const ChannelOpen& o) {
  return o.magic == kSetupMagic && o.version == kProtocolVersion && o.kind == kOpenKind && o.ring_size_log2 >= 10 &&
         o.ring_size_log2 <= 29 && o.queue_depth >= 4 && o.first_length <= kOpenFirstBytes &&
         o.client_channel != kLinkChannel && o.client_channel < kMaxChannels &&
         (o.tuple.family == AF_INET || o.tuple.family == AF_INET6) &&
         (o.max_server_ring_log2 == 0 || (o.max_server_ring_log2 >= 10 && o.max_server_ring_log2 <= 29));
}

void RdmaStream::on_answer(const ChannelAnswer* answer) {
  if (open_state_ != OpenState::kWaiting) return;
  if (answer == nullptr) {  // the link failed or went before the answer
    open_state_ = OpenState::kFailed;
    return;
  }
  if (answer->kind == kRefuseKind) {
    open_state_ = OpenState::kRefused;
    refused_why_ = answer->reason == 0 || answer->reason > kLastDeclineReason
                       ? DeclineReason::kServerStaysTcp
                       : static_cast<DeclineReason>(answer->reason);
    redirect_port_ = answer->redirect_port;
    return;
  }
  // Started here, in the order of the link's completions: the server's first messages on the channel
  // come after its answer, and find it ready.
  server_nonce_ = answer->server_nonce;
  peer_index_ = answer->server_channel;
  bool valid = answer->server_channel != kLinkChannel && answer->server_channel < kMaxChannels &&
               answer->ring_size_log2 >= 10 && answer->ring_size_log2 <= 29 && answer->queue_depth >= 4;
  open_state_ = valid && start(answer->ring_size_log2, answer->rkey, answer->queue_depth, true) == Status::kOk
                    ? OpenState::kAccepted
                    : OpenState::kFailed;
}

Status RdmaStream::open_on_link(const std::shared_ptr<StreamLink>& link, const Pairing& pairing,
                                StreamOptions sized, uint32_t server_ring_log2, std::unique_ptr<RdmaStream>* out,
                                uint16_t* redirect_port, DeclineReason* declined) {
  // Declared before the lock: a stream that fails here is destroyed after the lock is let go (its
  // destructor takes the link's lock).
  std::unique_ptr<RdmaStream> stream;
  std::unique_lock lock(link->mu());
  sized.recv_queue_depth = static_cast<uint16_t>(link->channel_depth(sized.recv_queue_depth));
  LinkSetup& setup = link->setup();
  int slot = setup.take_free_slot();
  if (slot < 0) return Status::kResources;
  if (link->stopped() || link->disconnected() || !link->has_room_for(sized.recv_queue_depth + 1)) {
    setup.give_back(static_cast<uint32_t>(slot));
    return Status::kResources;
  }
  stream.reset(new RdmaStream(link));
  if (stream->index_ == kLinkChannel) {  // the link has no index left
    setup.give_back(static_cast<uint32_t>(slot));
    return Status::kResources;
  }
  stream->options_ = sized;
  link->note_busy_poll(sized.busy_poll_us, sized.busy_poll_adaptive, sized.busy_poll_yield);
  stream->link_open_ = true;
  stream->tuple_ = pairing.tuple;
  stream->client_nonce_ = pairing.client_nonce;
  Status s = stream->create_channel_memory(false);
  // Our receives for the channel are posted before the server can send on it.
  if (s == Status::kOk) s = link->reserve_receives(stream->receive_quota());
  if (s != Status::kOk) {
    setup.give_back(static_cast<uint32_t>(slot));
    stream->open_state_ = OpenState::kRefused;  // nothing was asked: its memory goes with it
    return s;
  }
  ChannelOpen open{};
  open.magic = kSetupMagic;
  open.version = kProtocolVersion;
  open.kind = kOpenKind;
  open.ring_size_log2 = static_cast<uint8_t>(first_ring_log2(sized));
  open.max_server_ring_log2 = static_cast<uint8_t>(server_ring_log2);
  open.queue_depth = static_cast<uint8_t>(sized.recv_queue_depth);
  open.rkey = stream->ring_mr_->rkey;
  open.client_channel = static_cast<uint16_t>(stream->index_);
  open.tuple = pairing.tuple;
  open.client_nonce = pairing.client_nonce;
  // The stream's first bytes ride in the open when they fit; else the caller writes them as usual.
  bool carries_first = !pairing.first_bytes.empty() && pairing.first_bytes.size() <= kOpenFirstBytes;
  if (carries_first) {
    open.first_length = static_cast<uint8_t>(pairing.first_bytes.size());
    std::memcpy(open.first_bytes, pairing.first_bytes.data(), pairing.first_bytes.size());
  }
  setup.await(static_cast<uint32_t>(slot), {stream.get(), stream->index_, pairing.client_nonce});
  stream->open_state_ = OpenState::kWaiting;
  stream->open_slot_ = slot;
  if (LinkProgress::post_record(*link, &open, kLinkOpen, static_cast<uint32_t>(slot)) != Status::kOk) {
    setup.give_back(static_cast<uint32_t>(slot));
    stream->open_state_ = OpenState::kRefused;
    return Status::kResources;
  }
  auto deadline = Deadline::in_ms(sized.timeout_ms);
  while (stream->open_state_ == OpenState::kWaiting && !deadline.passed()) {
    stream->progress_unstarted();
    if (stream->open_state_ != OpenState::kWaiting) break;
    // The answer may be taken by another channel's thread of the link: LinkProgress::on_link_message notifies the
    // link's condition, on which we wait when another thread sleeps on the link.
    stream->wait(lock, false, deadline.poll_ms());
  }
  switch (stream->open_state_) {
    case OpenState::kAccepted:
      stream->first_bytes_in_open_ = carries_first;
      *out = std::move(stream);
      return Status::kOk;
    case OpenState::kRefused:
      *declined = stream->refused_why_;
      *redirect_port = stream->redirect_port_;
      return Status::kRejected;
    case OpenState::kWaiting:
      return Status::kTimeout;  // the destructor leaves the slot to the answer, whenever it comes
    default:
      return Status::kReset;
  }
}

Status RdmaStream::accept_on_link(const std::shared_ptr<StreamLink>& link, uint32_t slot, const ChannelOpen& open,
                                  uint64_t server_nonce, StreamOptions sized, std::unique_ptr<RdmaStream>* out) {
  std::unique_ptr<RdmaStream> stream;  // before the lock, as in open_on_link
  std::unique_lock lock(link->mu());
  sized.recv_queue_depth = static_cast<uint16_t>(link->channel_depth(sized.recv_queue_depth));
  ChannelAnswer answer{};
  answer.magic = kSetupMagic;
  answer.version = kProtocolVersion;
  answer.client_channel = open.client_channel;
  answer.client_nonce = open.client_nonce;
  auto refuse = [&](DeclineReason why, Status s) {
    answer.kind = kRefuseKind;
    answer.reason = static_cast<uint8_t>(why);
    LinkProgress::post_record(*link, &answer, kLinkAnswer, slot);
    return s;
  };
  if (link->stopped() || link->disconnected()) return Status::kReset;
  if (!link->has_room_for(sized.recv_queue_depth + 1)) return refuse(DeclineReason::kResources, Status::kResources);
  stream.reset(new RdmaStream(link));
  if (stream->index_ == kLinkChannel) return refuse(DeclineReason::kResources, Status::kResources);
  stream->options_ = sized;
  link->note_busy_poll(sized.busy_poll_us, sized.busy_poll_adaptive, sized.busy_poll_yield);
  stream->link_open_ = true;
  stream->tuple_ = open.tuple;
  stream->client_nonce_ = open.client_nonce;
  stream->server_nonce_ = server_nonce;
  stream->peer_index_ = open.client_channel;
  // The client's first bytes (valid_open bounded their length) are read before its ring's.
  stream->prefix_.assign(open.first_bytes, open.first_bytes + open.first_length);
  stream->first_bytes_in_open_ = open.first_length > 0;
  Status s = stream->create_channel_memory(false);
  if (s == Status::kOk) s = link->reserve_receives(stream->receive_quota());
  if (s == Status::kOk) s = stream->start(open.ring_size_log2, open.rkey, open.queue_depth, false);
  if (s != Status::kOk) {
    stream->open_state_ = OpenState::kRefused;  // the client makes nothing that writes here
    return refuse(s == Status::kMemoryLock ? DeclineReason::kMemoryLock
                  : s == Status::kRefused  ? DeclineReason::kRingTooLarge
                                           : DeclineReason::kResources,
                  s);
  }
  answer.kind = kAcceptKind;
  answer.ring_size_log2 = static_cast<uint8_t>(first_ring_log2(sized));
  answer.queue_depth = static_cast<uint8_t>(sized.recv_queue_depth);
  answer.rkey = stream->ring_mr_->rkey;
  answer.server_channel = static_cast<uint16_t>(stream->index_);
  answer.server_nonce = server_nonce;
  if (LinkProgress::post_record(*link, &answer, kLinkAnswer, slot) != Status::kOk) {
    stream->fail(Status::kReset);
    return Status::kReset;
  }
  *out = std::move(stream);
  return Status::kOk;
}

Status RdmaStream::progress_unstarted() {
  // progress() for a channel whose open is not answered yet: the link's completions, this one's
  // answer among them, without serving a stream that has no flow control yet. The completion event
  // is taken before the queue is polled, never after: a completion that came between the poll and
  // the taking would stay in the queue with nobody told (the queue no longer armed, the event gone),
  // and its channel's poller would sleep forever.
  LinkProgress::take_events(*link_, *this);
  LinkProgress::poll(*link_, this);
  LinkProgress::serve_touched(*link_, this);
  return Status::kOk;
}

}  // namespace tcp2rdma::transport
