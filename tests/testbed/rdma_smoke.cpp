// rdma_smoke: the testbed's first real RDMA program, raw librdmacm + verbs, none of tcp2rdma's code.
//
//   rdma_smoke server PORT                  accept one RC connection
//   rdma_smoke client ADDR PORT [--wrong-rkey]
//
// The server advertises a registered buffer (address, rkey) in the accept's private data. The client
// SENDs a greeting, the server checks it and SENDs a reply; then the client RDMA-Writes-with-immediate
// 1 MiB of a seeded pattern into the server's buffer. The server checks the immediate value and the
// bytes and SENDs back its checksum, which the client compares with its own. Both exit 0 only when
// every check held. With --wrong-rkey the client corrupts the rkey and succeeds only if the write is
// refused with a remote access error: proof that the checks above can fail.
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <arpa/inet.h>
#include <netdb.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr size_t kWriteBytes = 1 << 20;
constexpr uint32_t kImmediate = 0x7c2d5e01;
constexpr char kGreeting[] = "tcp2rdma smoke: hello";
constexpr char kReply[] = "tcp2rdma smoke: welcome";
constexpr auto kDeadline = std::chrono::seconds(20);

struct Advert {  // server -> client in the accept's private data
  uint64_t addr;
  uint32_t rkey;
  uint32_t len;
};

struct Verdict {  // server -> client after the write: what the server saw
  uint64_t checksum;
  uint32_t immediate;
  uint32_t ok;
};

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "rdma_smoke: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

void check(bool ok, const char* what) {
  if (!ok) die(what);
}

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void fill_pattern(uint8_t* p, size_t n) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    p[i] = static_cast<uint8_t>(x);
  }
}

rdma_cm_event* expect_event(rdma_event_channel* ch, rdma_cm_event_type want) {
  rdma_cm_event* ev = nullptr;
  check(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
  if (ev->event != want) {
    std::fprintf(stderr, "rdma_smoke: expected %s, got %s (status %d)\n", rdma_event_str(want),
                 rdma_event_str(ev->event), ev->status);
    std::exit(1);
  }
  return ev;
}

// One completion, waited for by polling under a deadline (a smoke test has no use for interrupts).
ibv_wc wait_completion(ibv_cq* cq) {
  ibv_wc wc{};
  auto until = std::chrono::steady_clock::now() + kDeadline;
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    check(n >= 0, "ibv_poll_cq");
    if (n == 1) return wc;
    if (std::chrono::steady_clock::now() > until) {
      std::fprintf(stderr, "rdma_smoke: no completion within the deadline\n");
      std::exit(1);
    }
  }
}

ibv_wc expect_success(ibv_cq* cq, ibv_wc_opcode want) {
  ibv_wc wc = wait_completion(cq);
  if (wc.status != IBV_WC_SUCCESS || wc.opcode != want) {
    std::fprintf(stderr, "rdma_smoke: completion %s (opcode %d, wanted %d)\n",
                 ibv_wc_status_str(wc.status), wc.opcode, want);
    std::exit(1);
  }
  return wc;
}

// Everything one side of the connection owns; both sides use the same shape.
struct Endpoint {
  rdma_cm_id* id = nullptr;
  // Sends and receives complete on separate queues: on one shared queue the peer's answer can be
  // polled before our own send's completion, and a smoke test that expects them in order flakes.
  ibv_cq* send_cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  std::vector<uint8_t> msg = std::vector<uint8_t>(256);
  std::vector<uint8_t> bulk = std::vector<uint8_t>(kWriteBytes);
  ibv_mr* msg_mr = nullptr;
  ibv_mr* bulk_mr = nullptr;

  void create_qp_and_buffers(int bulk_access) {
    send_cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
    recv_cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
    check(send_cq != nullptr && recv_cq != nullptr, "ibv_create_cq");
    ibv_qp_init_attr attr{};
    attr.send_cq = send_cq;
    attr.recv_cq = recv_cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 8;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    check(rdma_create_qp(id, nullptr, &attr) == 0, "rdma_create_qp");
    msg_mr = ibv_reg_mr(id->pd, msg.data(), msg.size(), IBV_ACCESS_LOCAL_WRITE);
    check(msg_mr != nullptr, "ibv_reg_mr(message buffer)");
    bulk_mr = ibv_reg_mr(id->pd, bulk.data(), bulk.size(), IBV_ACCESS_LOCAL_WRITE | bulk_access);
    check(bulk_mr != nullptr, "ibv_reg_mr(bulk buffer)");
  }

  void post_recv() { check(rdma_post_recv(id, nullptr, msg.data(), msg.size(), msg_mr) == 0, "post_recv"); }

  void send(const void* data, size_t len) {
    std::memcpy(msg.data(), data, len);
    check(rdma_post_send(id, nullptr, msg.data(), len, msg_mr, IBV_SEND_SIGNALED) == 0, "post_send");
    expect_success(send_cq, IBV_WC_SEND);
  }
};

int run_server(const char* port) {
  rdma_event_channel* ch = rdma_create_event_channel();
  check(ch != nullptr, "rdma_create_event_channel");
  rdma_cm_id* listener = nullptr;
  check(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP) == 0, "rdma_create_id");
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  check(rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&sin)) == 0, "rdma_bind_addr");
  check(rdma_listen(listener, 1) == 0, "rdma_listen");
  std::printf("server: listening on port %s\n", port);
  std::fflush(stdout);

  rdma_cm_event* ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  Endpoint ep;
  ep.id = ev->id;
  rdma_ack_cm_event(ev);
  ep.create_qp_and_buffers(IBV_ACCESS_REMOTE_WRITE);
  ep.post_recv();  // the greeting
  ep.post_recv();  // the write's immediate consumes a receive too

  Advert advert{reinterpret_cast<uint64_t>(ep.bulk.data()), ep.bulk_mr->rkey,
                static_cast<uint32_t>(ep.bulk.size())};
  rdma_conn_param param{};
  param.private_data = &advert;
  param.private_data_len = sizeof advert;
  param.responder_resources = param.initiator_depth = 1;
  check(rdma_accept(ep.id, &param) == 0, "rdma_accept");
  rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ESTABLISHED));

  expect_success(ep.recv_cq, IBV_WC_RECV);
  if (std::string_view(reinterpret_cast<char*>(ep.msg.data())) != kGreeting) {
    std::fprintf(stderr, "server: wrong greeting\n");
    return 1;
  }
  ep.send(kReply, sizeof kReply);

  ibv_wc wc = expect_success(ep.recv_cq, IBV_WC_RECV_RDMA_WITH_IMM);
  Verdict verdict{};
  verdict.immediate = ntohl(wc.imm_data);
  verdict.checksum = fnv1a(ep.bulk.data(), ep.bulk.size());
  std::vector<uint8_t> expected(kWriteBytes);
  fill_pattern(expected.data(), expected.size());
  verdict.ok = wc.byte_len == kWriteBytes && verdict.immediate == kImmediate && ep.bulk == expected;
  std::printf("server: write of %u bytes, immediate 0x%08x, bytes %s\n", wc.byte_len, verdict.immediate,
              verdict.ok ? "match" : "DIFFER");
  ep.send(&verdict, sizeof verdict);
  rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_DISCONNECTED));
  return verdict.ok ? 0 : 1;
}

// The server may not be listening yet (both start together): retry while it rejects or is unreachable.
rdma_cm_event* connect_with_retry(rdma_event_channel* ch, Endpoint& ep, const char* host, const char* port) {
  auto until = std::chrono::steady_clock::now() + kDeadline;
  for (;;) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    check(getaddrinfo(host, port, &hints, &res) == 0, "getaddrinfo");
    check(rdma_create_id(ch, &ep.id, nullptr, RDMA_PS_TCP) == 0, "rdma_create_id");
    check(rdma_resolve_addr(ep.id, nullptr, res->ai_addr, 2000) == 0, "rdma_resolve_addr");
    freeaddrinfo(res);
    rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
    check(rdma_resolve_route(ep.id, 2000) == 0, "rdma_resolve_route");
    rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
    ep.create_qp_and_buffers(0);
    ep.post_recv();  // the reply
    ep.post_recv();  // the verdict
    rdma_conn_param param{};
    param.responder_resources = param.initiator_depth = 1;
    param.retry_count = 7;
    check(rdma_connect(ep.id, &param) == 0, "rdma_connect");
    rdma_cm_event* ev = nullptr;
    check(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
    if (ev->event == RDMA_CM_EVENT_ESTABLISHED) return ev;
    std::fprintf(stderr, "client: %s, retrying\n", rdma_event_str(ev->event));
    rdma_ack_cm_event(ev);
    ibv_dereg_mr(ep.msg_mr);
    ibv_dereg_mr(ep.bulk_mr);
    rdma_destroy_qp(ep.id);
    ibv_destroy_cq(ep.send_cq);
    ibv_destroy_cq(ep.recv_cq);
    rdma_destroy_id(ep.id);
    if (std::chrono::steady_clock::now() > until) die("server never accepted");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

int run_client(const char* host, const char* port, bool wrong_rkey) {
  rdma_event_channel* ch = rdma_create_event_channel();
  check(ch != nullptr, "rdma_create_event_channel");
  Endpoint ep;
  rdma_cm_event* ev = connect_with_retry(ch, ep, host, port);
  Advert advert{};
  check(ev->param.conn.private_data_len >= sizeof advert, "short private data from the server");
  std::memcpy(&advert, ev->param.conn.private_data, sizeof advert);
  rdma_ack_cm_event(ev);

  ep.send(kGreeting, sizeof kGreeting);
  expect_success(ep.recv_cq, IBV_WC_RECV);
  if (std::string_view(reinterpret_cast<char*>(ep.msg.data())) != kReply) {
    std::fprintf(stderr, "client: wrong reply\n");
    return 1;
  }

  fill_pattern(ep.bulk.data(), ep.bulk.size());
  ibv_sge sge{reinterpret_cast<uint64_t>(ep.bulk.data()), static_cast<uint32_t>(kWriteBytes), ep.bulk_mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.imm_data = htonl(kImmediate);
  wr.wr.rdma.remote_addr = advert.addr;
  wr.wr.rdma.rkey = wrong_rkey ? advert.rkey ^ 0x5a5a00 : advert.rkey;
  check(ibv_post_send(ep.id->qp, &wr, &bad) == 0, "ibv_post_send(RDMA write)");
  ibv_wc wc = wait_completion(ep.send_cq);
  if (wrong_rkey) {
    bool refused = wc.status == IBV_WC_REM_ACCESS_ERR;
    std::printf("client: write with a wrong rkey: %s\n", ibv_wc_status_str(wc.status));
    return refused ? 0 : 1;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    std::fprintf(stderr, "client: RDMA write failed: %s\n", ibv_wc_status_str(wc.status));
    return 1;
  }
  expect_success(ep.recv_cq, IBV_WC_RECV);
  Verdict verdict{};
  std::memcpy(&verdict, ep.msg.data(), sizeof verdict);
  uint64_t mine = fnv1a(ep.bulk.data(), ep.bulk.size());
  bool ok = verdict.ok && verdict.checksum == mine;
  std::printf("client: server checksum %016llx, mine %016llx: %s\n",
              static_cast<unsigned long long>(verdict.checksum), static_cast<unsigned long long>(mine),
              ok ? "match" : "DIFFER");
  rdma_disconnect(ep.id);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 3 && std::string_view(argv[1]) == "server") return run_server(argv[2]);
  if ((argc == 4 || argc == 5) && std::string_view(argv[1]) == "client") {
    bool wrong_rkey = argc == 5 && std::string_view(argv[4]) == "--wrong-rkey";
    if (argc == 5 && !wrong_rkey) return 2;
    return run_client(argv[2], argv[3], wrong_rkey);
  }
  std::fprintf(stderr, "usage: rdma_smoke server PORT | rdma_smoke client ADDR PORT [--wrong-rkey]\n");
  return 2;
}
