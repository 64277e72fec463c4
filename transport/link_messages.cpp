// The link's own messages (docs/links.md, "Opening a channel on a live link"): a client's open and a
// server's answer, written into the other side's setup area with an immediate that names the
// link's channel 0 and the slot. Taken by whichever thread holds the link's lock (LinkProgress).
#include <arpa/inet.h>

#include <cstring>
#include <optional>

#include "link_progress.h"
#include "rdma_stream.h"
#include "stream_link.h"
#include "wire.h"

namespace tcp2rdma::transport {
namespace {

bool valid_answer(const ChannelAnswer& a) {
  return a.magic == kSetupMagic && a.version == kProtocolVersion && (a.kind == kAcceptKind || a.kind == kRefuseKind);
}

}  // namespace

Status LinkProgress::on_link_message(StreamLink& link, uint32_t arg) {
  // Every link message consumed one of the receives kept for the setup slots: put it back.
  if (!link.stopped() && link.post_receive() != Status::kOk) return Status::kResources;
  uint32_t slot = link_slot(arg);
  LinkSetup& setup = link.setup();
  if (slot >= kSetupSlots || !setup.has_areas()) return Status::kProtocolError;
  if (link_op(arg) == kLinkOpen) {
    // Only a server's link takes opens (LinkSetup::keep_open).
    if (Status s = setup.keep_open(slot); s != Status::kOk) return s;
    link.cv().notify_all();
    return Status::kOk;
  }
  if (link_op(arg) != kLinkAnswer) return Status::kProtocolError;
  ChannelAnswer answer{};
  std::memcpy(&answer, setup.own_slot(slot), sizeof answer);
  std::optional<LinkSetup::Awaiting> awaited = setup.waiting_in(slot);
  // An answer we did not ask for, or not for the open in that slot: the peer lies.
  if (!awaited || !valid_answer(answer) || answer.client_nonce != awaited->client_nonce ||
      answer.client_channel != awaited->index) {
    return Status::kProtocolError;
  }
  setup.give_back(slot);
  RdmaStream* stream = awaited->stream;
  uint32_t index = awaited->index;
  if (stream != nullptr) {
    stream->on_answer(&answer);
  } else if (answer.kind == kAcceptKind) {
    // Its connect gave up before the answer came: the server's new channel is ended at once (an
    // abort, then our release), and the peer's release frees what we left on the link.
    uint32_t imm_abort = encode_imm(MessageType::kEnd, answer.server_channel, kEndAbort);
    uint32_t imm_release = encode_imm(MessageType::kEnd, answer.server_channel, kEndRelease);
    for (uint32_t imm : {imm_abort, imm_release}) {
      ibv_send_wr wr{};
      wr.wr_id = StreamLink::work_id(index, StreamLink::kWrSignal);
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.imm_data = htonl(imm);
      wr.wr.rdma.rkey = answer.rkey;
      if (!link.send_queue_has_room(1) || link.post_send(&wr) != 0) break;
      link.on_channel_send_posted(index);
    }
  } else {
    link.on_retired_message(index, true);  // refused: the server made nothing that could write here
  }
  link.cv().notify_all();
  return Status::kOk;
}

Status LinkProgress::post_record(StreamLink& link, const void* record, uint32_t op, uint32_t slot) {
  // The send queue is the link's, shared by its channels: a busy link may have it full for a moment.
  // Its completions make room (taken here for their channels, with the link's lock held).
  auto deadline = Deadline::in_ms(1000);
  while (!link.send_queue_has_room(1) && !link.stopped() && !deadline.passed()) take_all(link);
  Status s = link.post_setup_record(record, op, slot);
  return s;
}

}  // namespace tcp2rdma::transport
