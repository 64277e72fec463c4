// switch_exchange: the switch's HELLO and ACK (preload/upgrade/switch_exchange.h) against a peer that
// gives up, answers late, or goes silent, over real RDMA streams in the Soft-RoCE VM.
//   switch_exchange server PORT        plays the peer of each case below on its own stream, raw
//   switch_exchange client ADDR PORT   runs exchange_counts on each (HELLO wait 2 s, ACK wait 6 s)
//                                      and exits 0 only if each came to what it must
// The cases, in order:
//   gives-up        the peer sends its HELLO and aborts without reading ours or sending an ACK (its
//                   HELLO wait ran out): stays TCP (before: a reset of a connection both could keep)
//   late-ack        the peer sends its HELLO, then answers only after 3 s, past our HELLO wait but
//                   within the ACK's: goes on
//   ack-then-abort  the peer sends HELLO and ACK, then aborts: the ACK came first, so it goes on
//                   (the abort is a later step's business)
//   silent          the peer sends its HELLO and then nothing, and keeps the stream: a reset (we sent
//                   our ACK, and nothing says what the peer did), at the ACK's wait
// Then the HELLO that rides in a channel's open (docs/links.md, "Short-lived connections"), each
// side running exchange_counts unless said otherwise; the streams open on the link the cases above
// made, which the client checks (first_bytes_in_open):
//   in-open         the client's open carried its HELLO and its counts did not change: it does not
//                   send it again; both go on with each other's counts
//   restated        the open said 3 bytes, the client froze at 5: it restates its HELLO on the
//                   stream; the server takes 5 (a tail of 2 after the 3 it had read), the client
//                   skips the server's ACK of 3; both go on
//   restated-twice  a hostile client (raw frames) restates twice: the server takes one restatement,
//                   reads the second as the ACK it must be, and resets
//   behind          the open said 3, the server has read 4 already, the client froze at 5: the
//                   server takes the open's HELLO as behind (not impossible), the client restates;
//                   both go on, a tail of 1 (found by integration.failover_killed.pair: a client
//                   writing bulk on TCP while it opened; the server had refused the open's count)
//   behind-not-restated  a hostile client (raw) whose open said 3, the server having read 4, sends
//                   its ACK without restating: the server resets (the counts are split)
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string_view>
#include <thread>

#include "../../transport/peer_util.h"
#include "upgrade/switch_exchange.h"
#include "upgrade/switch_frames.h"

using namespace peer_util;
using tcp2rdma::preload::Hello;
using tcp2rdma::preload::SwitchStep;
using tcp2rdma::transport::Deadline;

namespace {

constexpr const char* kCases[] = {"gives-up", "late-ack", "ack-then-abort", "silent"};
constexpr const char* kOpenCases[] = {"in-open", "restated", "restated-twice", "behind", "behind-not-restated"};
constexpr uint64_t kServerTcpBytes = 7, kClientTcpBytes = 5, kClientBytesAtOpen = 3;
// What the server has read of the client's TCP bytes, by case: more than the open said when behind.
uint64_t server_received(std::string_view which) { return which.starts_with("behind") ? 4 : kClientBytesAtOpen; }

bool write_frame(RdmaStream& s, const uint8_t* bytes, size_t n) {
  iovec iov{const_cast<uint8_t*>(bytes), n};
  size_t done = 0;
  return s.write(&iov, 1, 0, &done) == Status::kOk && done == n;
}

bool read_frame(RdmaStream& s, uint8_t* bytes, size_t n) {
  iovec iov{bytes, n};
  size_t done = 0;
  return s.read(&iov, 1, tcp2rdma::transport::kWaitAll, &done) == Status::kOk && done == n;
}

// The peer's side of one case, with raw frames.
bool play_server(RdmaStream& s, std::string_view which) {
  auto hello = tcp2rdma::preload::encode_hello(Hello{kServerTcpBytes, false});
  std::array<uint8_t, tcp2rdma::preload::kHelloSize> client_hello{};
  std::array<uint8_t, tcp2rdma::preload::kAckSize> client_ack{};
  if (!write_frame(s, hello.data(), hello.size())) return false;
  // The client has our HELLO at once and sends its ACK; each case answers after that, as a peer on a
  // slow or stalled link would (an abort that came first would fail the client's ACK instead, a
  // step the client takes before the one under test).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (which == "late-ack") std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  if (which == "silent") {
    std::this_thread::sleep_for(std::chrono::seconds(8));  // past the client's ACK wait
    s.close();
    return true;
  }
  if (which == "gives-up") {  // its wait for our HELLO ran out: it never read it
    s.abort();
    return true;
  }
  if (!read_frame(s, client_hello.data(), client_hello.size())) return false;
  auto ack = tcp2rdma::preload::encode_ack(kClientTcpBytes);
  if (!write_frame(s, ack.data(), ack.size())) return false;
  if (which == "ack-then-abort") {
    s.abort();
    return true;
  }
  bool ok = read_frame(s, client_ack.data(), client_ack.size()) &&
            tcp2rdma::preload::decode_ack(client_ack) == kServerTcpBytes;
  s.close();
  return ok;
}

SwitchStep::Kind expected(std::string_view which) {
  if (which == "gives-up") return SwitchStep::kStaysTcp;
  if (which == "silent") return SwitchStep::kBroken;
  return SwitchStep::kGoOn;
}

const char* kind_name(SwitchStep::Kind k) {
  return k == SwitchStep::kGoOn ? "goes on" : k == SwitchStep::kStaysTcp ? "stays tcp" : "reset";
}

std::unique_ptr<RdmaStream> connect_case(const char* host, const char* port, uint16_t client_port,
                                         std::span<const uint8_t> first_bytes = {}) {
  sockaddr_in addr = ipv4(host, port);
  tcp2rdma::transport::Pairing pairing;
  pairing.tuple.family = AF_INET;
  pairing.tuple.server_port = static_cast<uint16_t>(std::atoi(port));
  pairing.tuple.client_port = client_port;  // each case its own tuple
  std::memcpy(pairing.tuple.server_addr, &addr.sin_addr, 4);
  pairing.client_nonce = tcp2rdma::transport::random_nonce();
  pairing.first_bytes = first_bytes;
  std::unique_ptr<RdmaStream> s;
  Status st = Status::kRejected;
  for (int attempt = 0; attempt < 100 && st != Status::kOk; ++attempt) {
    st = RdmaStream::connect(reinterpret_cast<sockaddr*>(&addr), pairing, StreamOptions{}, &s);
    if (st != Status::kRejected && st != Status::kNoRoute && st != Status::kTimeout) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (st != Status::kOk) std::fprintf(stderr, "connect: %s\n", to_string(st));
  return s;
}

// Reads what the server sends until it ends the stream, then closes.
void drain(RdmaStream& s) {
  uint8_t sink[64];
  while (read_frame(s, sink, 16)) {
  }
  s.close();
}

// The hostile client of restated-twice: its open says 3 bytes, then two restatements (4, then 5)
// where one and an ACK belong. It reads what the server sends until the server ends the stream.
void play_restating_twice(RdmaStream& s) {
  for (uint64_t n : {uint64_t{4}, kClientTcpBytes}) {
    auto hello = tcp2rdma::preload::encode_hello(Hello{n, false});
    if (!write_frame(s, hello.data(), hello.size())) return;
  }
  drain(s);
}

// The hostile client of behind-not-restated: its open says 3, and it ACKs the server's HELLO at once,
// as if 3 still held.
void play_not_restating(RdmaStream& s) {
  auto ack = tcp2rdma::preload::encode_ack(kServerTcpBytes);
  if (write_frame(s, ack.data(), ack.size())) drain(s);
}

// One case of the HELLO in the open, the client's side: true when it came to what it must.
bool run_open_case(const char* host, const char* port, uint16_t client_port, std::string_view which) {
  Hello at_open{which == "in-open" ? kClientTcpBytes : kClientBytesAtOpen, false};
  auto first = tcp2rdma::preload::encode_hello(at_open);
  std::unique_ptr<RdmaStream> s = connect_case(host, port, client_port, first);
  if (!s) return false;
  if (!s->first_bytes_in_open()) {
    std::printf("client: %s: the HELLO did not go in an open (%s): WRONG\n", std::string(which).c_str(),
                s->opened_on_link() ? "opened on a link" : "a queue pair of its own");
    return false;
  }
  if (which == "restated-twice" || which == "behind-not-restated") {
    if (which == "restated-twice") {
      play_restating_twice(*s);
    } else {
      play_not_restating(*s);
    }
    std::printf("client: %s: played through\n", std::string(which).c_str());
    return true;
  }
  Hello peer;
  uint64_t tail = 0;
  SwitchStep step = tcp2rdma::preload::exchange_counts(*s, Hello{kClientTcpBytes, false}, kServerTcpBytes, true, 1 << 20,
                                                       Deadline::in_ms(2000), Deadline::in_ms(6000), &at_open, &peer,
                                                       &tail);
  bool ok = step.kind == SwitchStep::kGoOn && peer.tcp_bytes == kServerTcpBytes && tail == 0;
  std::printf("client: %s: %s (%s): %s\n", std::string(which).c_str(), kind_name(step.kind), step.why,
              ok ? "as it must" : "WRONG");
  s->close();
  return ok;
}

// One case of the HELLO in the open, the server's side: the server has read server_received() of the
// client's TCP bytes.
bool serve_open_case(RdmaStream& s, std::string_view which) {
  Hello peer;
  uint64_t tail = 0;
  uint64_t received = server_received(which);
  SwitchStep step = tcp2rdma::preload::exchange_counts(s, Hello{kServerTcpBytes, false}, received, false, 1 << 20,
                                                       Deadline::in_ms(2000), Deadline::in_ms(6000), nullptr, &peer,
                                                       &tail);
  bool hostile = which == "restated-twice" || which == "behind-not-restated";
  bool ok = hostile ? step.kind == SwitchStep::kBroken
                    : step.kind == SwitchStep::kGoOn && peer.tcp_bytes == kClientTcpBytes &&
                          tail == kClientTcpBytes - received && s.first_bytes_in_open();
  std::printf("server: %s: %s (%s): %s\n", std::string(which).c_str(), kind_name(step.kind), step.why,
              ok ? "as it must" : "WRONG");
  if (step.kind == SwitchStep::kGoOn) {
    s.close();
  } else {
    s.abort();
  }
  return ok;
}

int run_client(const char* host, const char* port) {
  bool all = true;
  uint16_t client_port = 40000;
  for (std::string_view which : kCases) {
    std::unique_ptr<RdmaStream> s = connect_case(host, port, client_port++);
    if (!s) return 1;
    Hello peer;
    uint64_t tail = 0;
    auto start = std::chrono::steady_clock::now();
    SwitchStep step = tcp2rdma::preload::exchange_counts(*s, Hello{kClientTcpBytes, false}, kServerTcpBytes, true,
                                                         1 << 20, Deadline::in_ms(2000), Deadline::in_ms(6000), nullptr, &peer, &tail);
    long ms = static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
    bool ok = step.kind == expected(which) && (step.kind != SwitchStep::kGoOn || (peer.tcp_bytes == kServerTcpBytes && tail == 0));
    std::printf("client: %s: %s (%s) after %ld ms%s: %s\n", std::string(which).c_str(), kind_name(step.kind),
                step.why, ms, s->opened_on_link() ? ", on the link" : "", ok ? "as it must" : "WRONG");
    all = all && ok;
    if (step.kind == SwitchStep::kGoOn) {
      s->close();
    } else {
      s->abort();
    }
  }
  for (std::string_view which : kOpenCases) all = run_open_case(host, port, client_port++, which) && all;
  return all ? 0 : 1;
}

int run_server(const char* port) {
  std::unique_ptr<StreamListener> listener = listen_on(port, StreamOptions{});
  if (!listener) return 1;
  bool all = true;
  for (std::string_view which : kCases) {
    std::unique_ptr<RdmaStream> s = accept_one(*listener);
    if (!s) return 1;
    bool ok = play_server(*s, which);
    std::printf("server: %s: played %s\n", std::string(which).c_str(), ok ? "through" : "with a FAILURE");
    all = all && ok;
  }
  for (std::string_view which : kOpenCases) {
    std::unique_ptr<RdmaStream> s = accept_one(*listener);
    if (!s) return 1;
    all = serve_open_case(*s, which) && all;
  }
  return all ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string_view mode = argc > 1 ? argv[1] : "";
  if (argc == 3 && mode == "server") return run_server(argv[2]);
  if (argc == 4 && mode == "client") return run_client(argv[2], argv[3]);
  std::fprintf(stderr, "usage: switch_exchange server PORT | client ADDR PORT\n");
  return 2;
}
