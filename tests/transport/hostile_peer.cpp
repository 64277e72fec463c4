// hostile_peer: a client that speaks just enough of the protocol to connect, then breaks it.
//   hostile_peer ADDR PORT MODE
// MODE: length-mismatch  data whose immediate claims more bytes than were written
//       overrun          more data than the ring space the server advertised
//       stray-wakeup     a wakeup answering an arm the server never made
//       bad-mailbox      a mailbox update claiming bytes consumed that the server never sent
//       data-after-close data after an orderly end
//       bad-end          an end message with an unknown argument
//       malformed-setup  first a connect request with garbage private data (must be rejected), then
//                        a well-formed one followed by a stray wakeup: the listener survived
//       huge-ring        first a well-formed request for a 512 MiB ring (must be rejected: the server
//                        would allocate and pin a bounce buffer as large), then as malformed-setup
//       forged-tuple     first a request whose tuple claims a client address that is not this host's
//                        (must be rejected), then as malformed-setup
// The server (stream_peer server-expect-violation) must report a protocol violation: no crash, no
// write outside its buffers (the writes here all stay inside the ring and mailbox it registered).
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

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
  AcceptReply peer{};
};

// What the last connection attempt ended with: ESTABLISHED, REJECTED, ...
rdma_cm_event_type last_event = RDMA_CM_EVENT_ESTABLISHED;

bool expect_event(rdma_event_channel* ch, rdma_cm_event_type want, AcceptReply* peer = nullptr) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev) != 0) return false;
  last_event = ev->event;
  bool ok = ev->event == want;
  if (ok && peer != nullptr) std::memcpy(peer, ev->param.conn.private_data, sizeof *peer);
  rdma_ack_cm_event(ev);
  return ok;
}

// Connects with `private_data`; retries while the server is not listening yet, unless a rejection is
// what the caller expects (`rejection_final`).
bool connect(const sockaddr_in& addr, std::vector<uint8_t>& buf, const void* private_data, uint8_t len,
             Connection* c, bool rejection_final = false) {
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
    ConnectRequest patched{};
    if (len == sizeof patched) {
      std::memcpy(&patched, private_data, sizeof patched);
      if (patched.magic == kSetupMagic && patched.tuple.client_addr[0] == 0) {
        std::memcpy(patched.tuple.client_addr, &reinterpret_cast<sockaddr_in*>(rdma_get_local_addr(c->id))->sin_addr, 4);
        private_data = &patched;
      }
    }
    c->cq = ibv_create_cq(c->id->verbs, 64, nullptr, nullptr, 0);
    ibv_qp_init_attr attr{};
    attr.send_cq = attr.recv_cq = c->cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 32;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    rdma_create_qp(c->id, nullptr, &attr);
    c->mr = ibv_reg_mr(c->id->pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    rdma_conn_param param{};
    param.private_data = private_data;
    param.private_data_len = len;
    param.retry_count = 7;
    if (rdma_connect(c->id, &param) != 0) return false;
    if (expect_event(c->channel, RDMA_CM_EVENT_ESTABLISHED, &c->peer)) return true;
    ibv_dereg_mr(c->mr);
    rdma_destroy_qp(c->id);
    ibv_destroy_cq(c->cq);
    rdma_destroy_id(c->id);
    if (last_event == RDMA_CM_EVENT_REJECTED && rejection_final) return false;
  }
  return false;
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
                established ? "was ACCEPTED (wrong)" : last_event == RDMA_CM_EVENT_REJECTED ? "rejected" : "failed");
    if (established || last_event != RDMA_CM_EVENT_REJECTED) return 1;
    c = Connection{};
  }
  ConnectRequest request = good_request(addr, 0);
  // The rkey is known only after registration, inside connect(); the server never writes to us in
  // these tests, so any rkey will do.
  if (!connect(addr, buf, &request, sizeof request, &c)) return 1;
  uint64_t ring = uint64_t{1} << c.peer.ring_size_log2;

  auto write_imm = [&](uint32_t length, uint32_t imm, uint64_t remote_offset, bool with_imm = true) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), length, c.mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = length > 0 ? &sge : nullptr;
    wr.num_sge = length > 0 ? 1 : 0;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = remote_offset;  // the server's ring is registered at iova 0
    wr.wr.rdma.rkey = c.peer.rkey;
    ibv_post_send(c.id->qp, &wr, &bad);
    ibv_wc wc{};
    while (ibv_poll_cq(c.cq, 1, &wc) == 0) {
    }
    std::printf("hostile: posted %u bytes, immediate 0x%08x: %s\n", length, imm, ibv_wc_status_str(wc.status));
  };
  if (mode == "length-mismatch") {
    write_imm(10, encode_imm(MessageType::kData, 100), 0);
  } else if (mode == "overrun") {
    // One write larger than the whole ring: it still lands inside the server's registration (the
    // mailbox follows the ring), so only the server's own check can catch it.
    uint32_t too_much = static_cast<uint32_t>(ring + 8);
    write_imm(too_much, encode_imm(MessageType::kData, too_much), 0);
  } else if (mode == "stray-wakeup" || mode == "malformed-setup" || mode == "huge-ring" || mode == "forged-tuple") {
    write_imm(0, encode_imm(MessageType::kWakeup, 7), 0);
  } else if (mode == "bad-mailbox") {
    // "I have consumed a million bytes of your stream": the server has sent none.
    uint64_t words[7] = {1, 1000000, 8, 0, 0, 0, 1};
    std::memcpy(buf.data(), words, sizeof words);
    write_imm(sizeof words, 0, ring, false);
    write_imm(1, encode_imm(MessageType::kData, 1), 0);  // a message, so that the server looks
  } else if (mode == "data-after-close") {
    write_imm(0, encode_imm(MessageType::kEnd, kEndClose), 0);
    write_imm(1, encode_imm(MessageType::kData, 1), 0);
  } else if (mode == "bad-end") {
    write_imm(0, encode_imm(MessageType::kEnd, 5), 0);
  } else {
    return 2;
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // let the server notice before we vanish
  return 0;
}
