// hostile_peer: a client that speaks just enough of the protocol to connect, then breaks it.
//   hostile_peer ADDR PORT MODE
// MODE: length-mismatch  data whose immediate claims more bytes than were written
//       overrun          more data than the ring space the server advertised
//       stray-wakeup     a wakeup answering an arm the server never made
//       bad-mailbox      a mailbox update claiming bytes consumed that the server never sent
//       data-after-close data after an orderly end
//       bad-end          an end message with an unknown argument
//       no-channel       a message for a channel the link does not carry: the server must disconnect
//                        the link at once (within 3 s: stream_peer holds its failed stream longer)
//       bad-ring-offer   a mailbox update offering a ring of generation 2 (no generation 1 before it)
//       bad-ring-move    a mailbox update answering a ring offer the server never made
//       malformed-setup  first a connect request with garbage private data (must be rejected), then
//                        a well-formed one followed by a stray wakeup: the listener survived
//       huge-ring        first a well-formed request for a 512 MiB ring (must be rejected: the server
//                        would allocate and pin a bounce buffer as large), then as malformed-setup
//       forged-tuple     first a request whose tuple claims a client address that is not this host's
//                        (must be rejected), then as malformed-setup
//       cross-rkey       two connections A and B to a stream_peer server-isolation: an RDMA Write
//                        through B with A's rkey must fail (remote access error: each stream has its
//                        own protection domain), then A carries "through A, untouched" and its end
//       silent           connects with a 1 MiB ring, then takes its queue pair to the error state
//                        without a word: nothing the server writes is acknowledged (stream_peer
//                        server-zcopy-abort)
//       starve           connects with 8 receives posted and never posts another: the server's
//                        small writes use six, its arm one; then an arm of ours (a mailbox update
//                        and an arm message) makes it answer with a wakeup, its last receive. Its
//                        end can then never be sent (stream_peer server-owed-close)
// The server (stream_peer server-expect-violation) must report a protocol violation: no crash, no
// write outside its buffers (the writes here all stay inside the ring and mailbox it registered).
#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "wire.h"

using namespace tcp2rdma::transport;

namespace {

struct Connection {
  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  ibv_mr* ring_mr = nullptr;  // where the server writes (starve): at iova 0, as the protocol has it
  AcceptReply peer{};
};

// What the last connection attempt ended with: ESTABLISHED, REJECTED, ... and the event's status (for
// a rejection, the IB CM's reason).
rdma_cm_event_type last_event = RDMA_CM_EVENT_ESTABLISHED;
int last_status = 0;
// A rejection by the listener's own code (rdma_reject), as opposed to one by the remote CM because
// nothing listens on the port yet (IB_CM_REJ_INVALID_SERVICE_ID, 8).
constexpr int kRejectedByConsumer = 28;  // IB_CM_REJ_CONSUMER_DEFINED

// A whole mailbox update (wire.h) saying we consumed the server's stream up to `consumed` and posted
// `posted` receives, nothing else.
MailboxRecord mailbox_record(uint64_t consumed, uint64_t posted) {
  MailboxRecord r{};
  r.seq = r.seq_end = 1;
  r.consumed = consumed;
  r.posted = posted;
  return r;
}

bool expect_event(rdma_event_channel* ch, rdma_cm_event_type want, AcceptReply* peer = nullptr) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev) != 0) return false;
  last_event = ev->event;
  last_status = ev->status;
  bool ok = ev->event == want;
  if (ok && peer != nullptr) std::memcpy(peer, ev->param.conn.private_data, sizeof *peer);
  rdma_ack_cm_event(ev);
  return ok;
}

// Whether the server disconnects within `ms`: a link whose peer broke the protocol is not kept for
// another channel.
bool disconnected_within(rdma_event_channel* ch, int ms) {
  pollfd p{ch->fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1 && expect_event(ch, RDMA_CM_EVENT_DISCONNECTED);
}

// Connects with `private_data`; retries while the server is not listening yet. With `rejection_final`
// a rejection by the server's listener ends the attempts (the caller expects one); the remote CM's
// "nothing listens here" does not: the hostile request must reach the server's checks, or the test
// would pass without them.
bool connect(const sockaddr_in& addr, std::vector<uint8_t>& buf, const void* private_data, uint8_t len,
             Connection* c, bool rejection_final = false, int receives = 0) {
  // With receives, the server writes to us: the request then carries our buffer's real rkey.
  c->channel = rdma_create_event_channel();
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rdma_create_id(c->channel, &c->id, nullptr, RDMA_PS_TCP);
    if (rdma_resolve_addr(c->id, nullptr, (sockaddr*)&addr, 2000) != 0 ||
        !expect_event(c->channel, RDMA_CM_EVENT_ADDR_RESOLVED) || rdma_resolve_route(c->id, 2000) != 0 ||
        !expect_event(c->channel, RDMA_CM_EVENT_ROUTE_RESOLVED)) {
      return false;
    }
    // A request's tuple must name where it comes from (the listener checks it): filled in here,
    // unless the mode forges it.
    // Each attempt stands for a new connection (a port of its own): the listener rejects a second
    // request for a connection it already holds one for, and an earlier attempt may still be held.
    ConnectRequest patched{};
    const void* data = private_data;
    if (len == sizeof patched) {
      std::memcpy(&patched, private_data, sizeof patched);
      if (patched.magic == kSetupMagic) {
        if (patched.tuple.client_addr[0] == 0) {
          std::memcpy(patched.tuple.client_addr, &reinterpret_cast<sockaddr_in*>(rdma_get_local_addr(c->id))->sin_addr, 4);
        }
        patched.tuple.client_port = static_cast<uint16_t>(patched.tuple.client_port + attempt);
        data = &patched;
      }
    }
    c->cq = ibv_create_cq(c->id->verbs, 64, nullptr, nullptr, 0);
    ibv_qp_init_attr attr{};
    attr.send_cq = attr.recv_cq = c->cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 32;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    rdma_create_qp(c->id, nullptr, &attr);
    for (int i = 0; i < receives; ++i) {  // before the connection: the server may write at once
      ibv_recv_wr wr{}, *bad = nullptr;
      ibv_post_recv(c->id->qp, &wr, &bad);
    }
    c->mr = ibv_reg_mr(c->id->pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (receives > 0 && data == &patched) {
      // iova 0 needs a page-aligned start (the adapter maps whole pages from there).
      auto base = (reinterpret_cast<uintptr_t>(buf.data()) + 4095) & ~uintptr_t{4095};
      c->ring_mr = ibv_reg_mr_iova(c->id->pd, reinterpret_cast<void*>(base), buf.size() / 4, 0,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      if (c->ring_mr == nullptr) return false;
      patched.rkey = c->ring_mr->rkey;
    }
    rdma_conn_param param{};
    param.private_data = data;
    param.private_data_len = len;
    param.retry_count = 7;
    if (rdma_connect(c->id, &param) != 0) return false;
    if (expect_event(c->channel, RDMA_CM_EVENT_ESTABLISHED, &c->peer)) return true;
    std::printf("hostile: attempt %d ended with %s (status %d)\n", attempt, rdma_event_str(last_event), last_status);
    ibv_dereg_mr(c->mr);
    rdma_destroy_qp(c->id);
    ibv_destroy_cq(c->cq);
    rdma_destroy_id(c->id);
    if (last_event == RDMA_CM_EVENT_REJECTED && last_status == kRejectedByConsumer && rejection_final) return false;
  }
  return false;
}

// One RDMA Write (with immediate or not) from `src` through `conn`, waited for: its completion status.
ibv_wc_status post_and_wait(Connection& conn, std::vector<uint8_t>& src, uint32_t length, uint32_t rkey,
                            uint64_t remote_offset, bool with_imm, uint32_t imm, size_t src_offset = 0) {
  ibv_sge sge{reinterpret_cast<uint64_t>(src.data() + src_offset), length, conn.mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = length > 0 ? &sge : nullptr;
  wr.num_sge = length > 0 ? 1 : 0;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote_offset;  // the server's ring is registered at iova 0
  wr.wr.rdma.rkey = rkey;
  ibv_post_send(conn.id->qp, &wr, &bad);
  // Bounded: a server that caught the violation from its mailbox before this write arrived has taken
  // its queue pair to the error state, and our queue pair (retry count 7, which rxe takes as "for
  // ever") would then retry the write for good (a suite run hung here).
  ibv_wc wc{};
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ibv_poll_cq(conn.cq, 1, &wc) == 0) {
    if (std::chrono::steady_clock::now() > until) return IBV_WC_RESP_TIMEOUT_ERR;  // never completed
  }
  return wc.status;
}

ConnectRequest good_request(const sockaddr_in& addr, uint32_t rkey) {
  ConnectRequest r{};
  r.magic = kSetupMagic;
  r.version = kProtocolVersion;
  r.ring_size_log2 = 16;
  r.rkey = rkey;
  r.queue_depth = 8;
  r.tuple.family = AF_INET;
  r.tuple.server_port = ntohs(addr.sin_port);
  std::memcpy(r.tuple.server_addr, &addr.sin_addr, 4);
  r.client_nonce = 0x1234;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  std::string_view mode = argv[3];
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[2])));
  if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) return 2;
  std::vector<uint8_t> buf(1 << 20);
  Connection c;
  if (mode == "malformed-setup" || mode == "huge-ring" || mode == "forged-tuple") {
    const char garbage[] = "garbage: not a tcp2rdma request at all";
    ConnectRequest odd = good_request(addr, 0);
    if (mode == "huge-ring") odd.ring_size_log2 = 29;
    if (mode == "forged-tuple") inet_pton(AF_INET, "10.9.9.9", odd.tuple.client_addr);
    bool established = mode == "malformed-setup" ? connect(addr, buf, garbage, sizeof garbage, &c, true)
                                                 : connect(addr, buf, &odd, sizeof odd, &c, true);
    std::printf("hostile: %s request %s\n", mode.data(),
                established                                   ? "was ACCEPTED (wrong)"
                : last_event == RDMA_CM_EVENT_REJECTED && last_status == kRejectedByConsumer ? "rejected by the server"
                                                                                              : "failed");
    if (established || last_event != RDMA_CM_EVENT_REJECTED || last_status != kRejectedByConsumer) return 1;
    c = Connection{};
  }
  if (mode == "cross-rkey") {
    Connection b;
    std::vector<uint8_t> buf_b(1 << 20);
    ConnectRequest ra = good_request(addr, 0), rb = good_request(addr, 0);
    ra.tuple.client_port = 40001;  // two connections: two tuples (the listener rejects a duplicate)
    rb.tuple.client_port = 40002;
    if (!connect(addr, buf, &ra, sizeof ra, &c) || !connect(addr, buf_b, &rb, sizeof rb, &b)) return 1;
    auto write_via = [](Connection& conn, std::vector<uint8_t>& src, uint32_t length, uint32_t rkey, uint64_t offset,
                        bool with_imm, uint32_t imm) { return post_and_wait(conn, src, length, rkey, offset, with_imm, imm); };
    std::memset(buf_b.data(), 'X', 64);
    ibv_wc_status cross = write_via(b, buf_b, 64, c.peer.rkey, 0, false, 0);
    std::printf("hostile: a write into A's ring through B: %s\n", ibv_wc_status_str(cross));
    if (cross == IBV_WC_SUCCESS) return 1;  // another connection's memory was reachable
    const char text[] = "through A, untouched";
    std::memcpy(buf.data(), text, sizeof text - 1);
    // Where the server reads A's first byte: its cursor starts at a mix of both nonces (wire.h).
    uint64_t ring_size = uint64_t{1} << c.peer.ring_size_log2;
    uint64_t first = stream_cursor_origin(ra.client_nonce, c.peer.server_nonce, true) & (ring_size - 1);
    uint32_t n = sizeof text - 1, head = static_cast<uint32_t>(std::min<uint64_t>(n, ring_size - first));
    ibv_wc_status data = write_via(c, buf, head, c.peer.rkey, first, true, encode_imm(MessageType::kData, kFirstChannel, head));
    if (head < n && data == IBV_WC_SUCCESS) {  // the ring wraps: the rest from its start
      std::memmove(buf.data(), buf.data() + head, n - head);
      data = write_via(c, buf, n - head, c.peer.rkey, 0, true, encode_imm(MessageType::kData, kFirstChannel, n - head));
    }
    ibv_wc_status end = write_via(c, buf, 0, c.peer.rkey, 0, true, encode_imm(MessageType::kEnd, kFirstChannel, kEndClose));
    std::printf("hostile: A's bytes: %s, A's end: %s\n", ibv_wc_status_str(data), ibv_wc_status_str(end));
    if (data != IBV_WC_SUCCESS || end != IBV_WC_SUCCESS) return 1;
    std::this_thread::sleep_for(std::chrono::seconds(2));  // let the server read before we vanish
    return 0;
  }
  if (mode == "silent") {
    ConnectRequest request = good_request(addr, 0);
    request.ring_size_log2 = 20;  // room for many zero-copy writes in flight at once
    if (!connect(addr, buf, &request, sizeof request, &c)) return 1;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    if (ibv_modify_qp(c.id->qp, &attr, IBV_QP_STATE) != 0) return 1;
    std::printf("hostile: connected, then silent\n");
    std::this_thread::sleep_for(std::chrono::seconds(5));
    return 0;
  }
  if (mode == "starve") {
    ConnectRequest request = good_request(addr, 0);  // queue_depth 8: the receives posted here
    if (!connect(addr, buf, &request, sizeof request, &c, false, request.queue_depth)) return 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the server writes, blocks, arms
    uint64_t ring = uint64_t{1} << c.peer.ring_size_log2;
    // Our mailbox update, as the protocol has it: nothing consumed of the server's stream, no receive
    // posted beyond the first 8, armed once, having seen a single receive of the server's, which our
    // arm takes (blocked on credits: the server's advertised receives are news for us, and it owes
    // the wakeup at once).
    uint64_t consumed = stream_cursor_origin(request.client_nonce, c.peer.server_nonce, false);
    uint64_t seen_consumed = stream_cursor_origin(request.client_nonce, c.peer.server_nonce, true);
    MailboxRecord words = mailbox_record(consumed, request.queue_depth);
    words.armed = 1;
    words.seen_consumed = seen_consumed;
    words.seen_posted = 1;
    constexpr size_t kOutbox = 1 << 19;  // beyond the ring and mailbox the server writes into
    std::memcpy(buf.data() + kOutbox, &words, sizeof words);
    ibv_wc_status update = post_and_wait(c, buf, sizeof words, c.peer.rkey, ring, false, 0, kOutbox);
    ibv_wc_status arm = post_and_wait(c, buf, 0, c.peer.rkey, 0, true, encode_imm(MessageType::kArm, kFirstChannel, 1));
    std::printf("hostile: armed (update %s, arm %s); no receive posted from now on\n", ibv_wc_status_str(update),
                ibv_wc_status_str(arm));
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(8));
    return update == IBV_WC_SUCCESS && arm == IBV_WC_SUCCESS ? 0 : 1;
  }
  ConnectRequest request = good_request(addr, 0);
  // The rkey is known only after registration, inside connect(); the server never writes to us in
  // these tests, so any rkey will do.
  if (!connect(addr, buf, &request, sizeof request, &c)) return 1;
  uint64_t ring = uint64_t{1} << c.peer.ring_size_log2;

  auto write_imm = [&](uint32_t length, uint32_t imm, uint64_t remote_offset, bool with_imm = true) {
    ibv_wc_status status = post_and_wait(c, buf, length, c.peer.rkey, remote_offset, with_imm, imm);
    std::printf("hostile: posted %u bytes, immediate 0x%08x: %s\n", length, imm, ibv_wc_status_str(status));
  };

  if (mode == "length-mismatch") {
    write_imm(10, encode_imm(MessageType::kData, kFirstChannel, 100), 0);
  } else if (mode == "overrun") {
    // One write larger than the whole ring: it still lands inside the server's registration (the
    // mailbox follows the ring), so only the server's own check can catch it.
    uint32_t too_much = static_cast<uint32_t>(ring + 8);
    write_imm(too_much, encode_imm(MessageType::kData, kFirstChannel, too_much), 0);
  } else if (mode == "stray-wakeup" || mode == "malformed-setup" || mode == "huge-ring" || mode == "forged-tuple") {
    write_imm(0, encode_imm(MessageType::kWakeup, kFirstChannel, 7), 0);
  } else if (mode == "bad-mailbox" || mode == "bad-ring-offer" || mode == "bad-ring-move") {
    // bad-mailbox: "I have consumed a million bytes of your stream": the server has sent none. The
    // others: a valid update but for its ring offer, or its answer to one.
    MailboxRecord words = mailbox_record(stream_cursor_origin(request.client_nonce, c.peer.server_nonce, false),
                                         request.queue_depth);
    if (mode == "bad-mailbox") words.consumed = 1000000;
    if (mode == "bad-ring-offer") {
      words.ring_gen = 2;
      words.ring_size_log2 = 20;
    }
    if (mode == "bad-ring-move") {
      words.moved_gen = 1;
      words.moved_at = stream_cursor_origin(request.client_nonce, c.peer.server_nonce, true);
    }
    std::memcpy(buf.data(), &words, sizeof words);
    write_imm(sizeof words, 0, ring, false);
    write_imm(1, encode_imm(MessageType::kData, kFirstChannel, 1), 0);  // a message, so that the server looks
  } else if (mode == "data-after-close") {
    write_imm(0, encode_imm(MessageType::kEnd, kFirstChannel, kEndClose), 0);
    write_imm(1, encode_imm(MessageType::kData, kFirstChannel, 1), 0);
  } else if (mode == "no-channel") {
    // A byte for channel 7 of a link that carries only channel 1. The violation is the whole link's:
    // the server disconnects it, so that no channel opens on it again.
    write_imm(1, encode_imm(MessageType::kData, 7, 1), 0);
    bool dropped = disconnected_within(c.channel, 3000);
    std::printf("hostile: the server %s the link\n", dropped ? "disconnected" : "did NOT disconnect");
    return dropped ? 0 : 1;
  } else if (mode == "bad-end") {
    write_imm(0, encode_imm(MessageType::kEnd, kFirstChannel, kEndCloseRelease + 1), 0);  // none of the seven
  } else {
    return 2;
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // let the server notice before we vanish
  return 0;
}
