// hostile_peer: a client that speaks just enough of the protocol to connect, then breaks it.
//   hostile_peer ADDR PORT MODE
// MODE: length-mismatch  data whose immediate claims more bytes than were written
//       overrun          more data than the ring space the server advertised
//       stray-wakeup     a wakeup answering an arm the server never made
// The server (stream_peer server-expect-violation) must report a protocol violation: no crash, no
// write outside its buffers (the writes here all stay inside the ring it registered).
#include <arpa/inet.h>
#include <netdb.h>
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

bool expect_event(rdma_event_channel* ch, rdma_cm_event_type want, SetupInfo* peer = nullptr) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev) != 0) return false;
  bool ok = ev->event == want;
  if (ok && peer != nullptr) std::memcpy(peer, ev->param.conn.private_data, sizeof *peer);
  rdma_ack_cm_event(ev);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  std::string_view mode = argv[3];
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  if (getaddrinfo(argv[1], argv[2], &hints, &res) != 0) return 2;
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  SetupInfo peer{};
  std::vector<uint8_t> buf(1 << 20);
  ibv_mr* mr = nullptr;
  ibv_cq* cq = nullptr;
  bool connected = false;
  for (int attempt = 0; attempt < 50 && !connected; ++attempt) {  // the server may not listen yet
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP);
    if (rdma_resolve_addr(id, nullptr, res->ai_addr, 2000) != 0 || !expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED) ||
        rdma_resolve_route(id, 2000) != 0 || !expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) {
      return 1;
    }
    cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
    ibv_qp_init_attr attr{};
    attr.send_cq = attr.recv_cq = cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 8;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    rdma_create_qp(id, nullptr, &attr);
    mr = ibv_reg_mr(id->pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    SetupInfo mine{kSetupMagic, kProtocolVersion, 16, mr->rkey, reinterpret_cast<uint64_t>(buf.data()), 0, 0, 8};
    rdma_conn_param param{};
    param.private_data = &mine;
    param.private_data_len = sizeof mine;
    param.retry_count = 7;
    if (rdma_connect(id, &param) != 0) return 1;
    connected = expect_event(ch, RDMA_CM_EVENT_ESTABLISHED, &peer);
    if (!connected) {
      ibv_dereg_mr(mr);
      rdma_destroy_qp(id);
      ibv_destroy_cq(cq);
      rdma_destroy_id(id);
    }
  }
  if (!connected) return 1;
  uint64_t ring = uint64_t{1} << peer.ring_size_log2;

  auto write_imm = [&](uint32_t length, uint32_t imm, uint64_t remote_offset) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), length, mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = length > 0 ? &sge : nullptr;
    wr.num_sge = length > 0 ? 1 : 0;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = peer.ring_addr + remote_offset;
    wr.wr.rdma.rkey = peer.rkey;
    ibv_post_send(id->qp, &wr, &bad);
    ibv_wc wc{};
    while (ibv_poll_cq(cq, 1, &wc) == 0) {
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
  } else if (mode == "stray-wakeup") {
    write_imm(0, encode_imm(MessageType::kWakeup, 7), 0);
  } else {
    return 2;
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // let the server notice before we vanish
  return 0;
}
