// failover_drain: what a stream takes from its link's completion queue when it stops its path for a
// failover (RdmaStream::stop_path, docs/protocol.md "When the RDMA path fails"), on a link that carries
// two channels. Run in the Soft-RoCE VM, both ends in one guest.
//   failover_drain server PORT       accepts two streams (A, then B), once the client wrote on A
//                                    writes 1000 bytes on B, says so in $T2R_WORK/drain-written,
//                                    and waits for the client's verdict
//   failover_drain client ADDR PORT  connects A, then B (a channel on A's link), writes 100 bytes on A
//                                    (unsignalled sends that complete without a completion), waits
//                                    until B's 1000 bytes are in, untouched, then stops A's path
// The client checks: A's stop counts nothing received (B's message in the queue is B's, not A's: taken
// as A's, A's failover record would claim bytes the peer never sent on A, and A's unread bytes would
// be its ring's stale ones); B's stop counts B's 1000 bytes, and the bytes B leaves unread are the
// server's; and A's stop returns long before the stream's timeout (the link's drain marker counts off
// the sends that completed unsignalled; without it the drain waits out the timeout). Exit 0 only then.
//
//   failover_drain inflight-server PORT       accepts A and B, reads nothing;
//                                             once A's path is stopped, stops B's and says in
//                                             $T2R_WORK/inflight-received how far B's bytes arrived
//   failover_drain inflight-client ADDR PORT  connects A and B, starts a zero-copy write of 512 KiB
//                                             on B in a thread and, while it is in flight (the pair's
//                                             wire delays frames), stops A's path
// A's stop puts the link's queue pair in the error state and drains its completion queue: B's send,
// flushed there, is B's failure, not an acknowledgement. B's write copies the bytes it took into the
// bounce mirror on its way out, and B's failover resends from the server's received cursor: the
// resend must be B's bytes. Counted off in silence by A's drain, B's send looked acknowledged, its
// write made no copy, and its resend was the mirror's stale bytes (integration/soak-chaos found it).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "deadline.h"
#include "peer_util.h"

using namespace peer_util;
using tcp2rdma::transport::Deadline;

namespace {

constexpr size_t kOnB = 1000;
constexpr int kTimeoutMs = 20000;  // the stream's timeout: a drain that waits it out is the bug

StreamOptions options() {
  StreamOptions o;
  o.timeout_ms = kTimeoutMs;
  return o;
}

int server(const char* port) {
  std::unique_ptr<StreamListener> listener = listen_on(port, options());
  if (!listener) return 1;
  std::unique_ptr<RdmaStream> a = accept_one(*listener);
  std::unique_ptr<RdmaStream> b = a ? accept_one(*listener) : nullptr;
  if (!b) return 1;
  // After the client's write on A, whose progress would have taken B's message from the queue.
  if (!wait_for_work_file("drain-a-written", 60)) return 1;
  std::vector<uint8_t> bytes(kOnB);
  fill(bytes.data(), bytes.size(), b->server_nonce(), 0);
  iovec iov{bytes.data(), bytes.size()};
  size_t done = 0;
  if (b->write(&iov, 1, 0, &done) != Status::kOk || done != kOnB) {
    std::fprintf(stderr, "server: the write on B took %zu of %zu bytes\n", done, kOnB);
    return 1;
  }
  write_work_file("drain-written", "written");
  // The client's queue pair goes to the error state without a word: nothing here ends by itself.
  return wait_for_work_file("drain-checked", 120) ? 0 : 1;
}

int check(const char* host, const char* port) {
  std::unique_ptr<RdmaStream> a = connect_to(host, port, options());
  std::unique_ptr<RdmaStream> b = a ? connect_on_link(host, port, 20001, options()) : nullptr;
  if (!b) return 1;
  if (!b->opened_on_link()) {
    std::fprintf(stderr, "client: B did not open as a channel on A's link: nothing shares a queue\n");
    return 1;
  }
  std::vector<uint8_t> out(100, 0x5a);
  iovec iov{out.data(), out.size()};
  size_t done = 0;
  if (a->write(&iov, 1, 0, &done) != Status::kOk || done != out.size()) {
    std::fprintf(stderr, "client: the write on A took %zu of %zu bytes\n", done, out.size());
    return 1;
  }
  write_work_file("drain-a-written", "written");
  // B's message lands in the link's completion queue; nobody here polls it before A stops.
  if (!wait_for_work_file("drain-written", 60)) {
    std::fprintf(stderr, "client: the server never wrote on B\n");
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  auto began = std::chrono::steady_clock::now();
  RdmaStream::PathEnd end_a = a->stop_path();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began).count();
  RdmaStream::PathEnd end_b = b->stop_path();
  std::vector<uint8_t> unread, resend;
  tcp2rdma::transport::FailoverError why = tcp2rdma::transport::FailoverError::kNone;
  // Cursors are stream positions (they start where the setup put them): what arrived is the distance
  // from what the application read. B wrote nothing, so the server has all of it.
  Status left = b->leave_path(end_b.sent.sent, &unread, &resend, &why);
  uint64_t on_a = end_a.received.received - end_a.received.consumed;
  uint64_t on_b = end_b.received.received - end_b.received.consumed;
  size_t wrong = first_difference(unread.data(), std::min(unread.size(), kOnB), b->server_nonce(), 0);
  std::printf("client: A's stop took %lld ms and counts %llu bytes received; B's counts %llu, leaves %zu unread "
              "(%s; first wrong byte at %zu)\n",
              static_cast<long long>(ms), ull(on_a), ull(on_b), unread.size(), to_string(left), wrong);
  bool ok = on_a == 0 && on_b == kOnB && left == Status::kOk && unread.size() == kOnB && wrong == kOnB &&
            ms < kTimeoutMs / 2;
  write_work_file("drain-checked", ok ? "ok" : "failed");
  return ok ? 0 : 1;
}

// Less than the peer's ring (1 MiB): one message, posted whole, that the write waits to see
// acknowledged; in flight for the client guest's netem delay at least (the test's link delays frames).
constexpr size_t kInFlight = size_t{512} << 10;

int inflight_server(const char* port) {
  std::unique_ptr<StreamListener> listener = listen_on(port, options());
  if (!listener) return 1;
  std::unique_ptr<RdmaStream> a = accept_one(*listener);
  std::unique_ptr<RdmaStream> b = a ? accept_one(*listener) : nullptr;
  if (!b) return 1;
  if (!wait_for_work_file("inflight-stopped", 60)) return 1;
  // The client's queue pair is in the error state: what arrived here is all that ever will.
  RdmaStream::PathEnd end = b->stop_path();
  write_work_file("inflight-received", std::to_string(end.received.received));
  return wait_for_work_file("inflight-checked", 120) ? 0 : 1;
}

int inflight_check(const char* host, const char* port) {
  std::unique_ptr<RdmaStream> a = connect_to(host, port, options());
  std::unique_ptr<RdmaStream> b = a ? connect_on_link(host, port, 20001, options()) : nullptr;
  if (!b) return 1;
  if (!b->opened_on_link()) {
    std::fprintf(stderr, "client: B did not open as a channel on A's link\n");
    return 1;
  }
  std::vector<uint8_t> out(kInFlight);
  fill(out.data(), out.size(), b->client_nonce(), 0);
  Status wrote = Status::kOk;
  size_t done = 0;
  std::thread writer([&] {
    iovec iov{out.data(), out.size()};
    wrote = b->write(&iov, 1, 0, &done);
  });
  // B's message posted (its zero-copy bytes counted), then A stops the link under it.
  auto posted = Deadline::in_ms(10000);
  while (b->counters().zcopy_bytes == 0 && !posted.passed()) std::this_thread::yield();
  a->stop_path();
  write_work_file("inflight-stopped", "stopped");
  writer.join();
  RdmaStream::PathEnd end_b = b->stop_path();
  uint64_t received = 0;
  if (!wait_for_work_file("inflight-received", 60) ||
      !(std::ifstream(work_file("inflight-received")) >> received)) {
    std::fprintf(stderr, "client: the server never said how far B's bytes arrived\n");
    return 1;
  }
  std::vector<uint8_t> unread, resend;
  tcp2rdma::transport::FailoverError why = tcp2rdma::transport::FailoverError::kNone;
  Status left = b->leave_path(received, &unread, &resend, &why);
  // The resend ends where B's sent cursor does, at the write's last byte.
  uint64_t sent = end_b.sent.sent;
  size_t from = resend.size() <= done ? done - resend.size() : 0;
  size_t wrong = resend.size() <= done ? first_difference(resend.data(), resend.size(), b->client_nonce(), from)
                                       : 0;
  std::printf("client: B's write of %zu bytes returned %s with %zu taken; the server has %llu of them, "
              "the resend holds %zu (%s; first wrong byte at %zu)\n",
              out.size(), to_string(wrote), done, ull(done - (sent - received)), resend.size(), to_string(left),
              wrong);
  bool exercised = !resend.empty();
  if (!exercised) std::fprintf(stderr, "client: B's write was not in flight when A stopped the link\n");
  bool ok = exercised && left == Status::kOk && wrong == resend.size();
  write_work_file("inflight-checked", ok ? "ok" : "failed");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "server") return server(argv[2]);
  if (argc == 4 && std::string_view(argv[1]) == "client") return check(argv[2], argv[3]);
  if (argc == 3 && std::string_view(argv[1]) == "inflight-server") return inflight_server(argv[2]);
  if (argc == 4 && std::string_view(argv[1]) == "inflight-client") return inflight_check(argv[2], argv[3]);
  std::fprintf(stderr, "usage: failover_drain server PORT | client ADDR PORT | inflight-server PORT | "
                       "inflight-client ADDR PORT\n");
  return 2;
}
