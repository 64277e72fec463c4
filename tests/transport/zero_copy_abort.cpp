// zero_copy_abort: a channel's zero-copy write that its peer's abort ends while the write is in flight,
// on a link that carries a second channel. Run in the Soft-RoCE pair; the client's guest delays its
// frames (netem), so that the client's abort reaches the server before the acknowledgement of the
// server's write does.
//   zero_copy_abort server PORT       accepts A, then B (a channel on A's link); writes 512 KiB on B
//                                     in a thread, and once that write is posted tells the client
//                                     ($T2R_WORK/abort-now); after the write has returned, writes
//                                     "still here" on A
//   zero_copy_abort client ADDR PORT  connects A and B; aborts B when told; reads A's line
// The abort is B's alone: the server's write waits for its send to complete (the peer's ring stays
// registered until our release, which goes after it) and A goes on on the same link. Stopping the
// link for it, as the write did, failed A too (in the module: every connection on the link failed
// over to TCP, and those already closed read a reset). Exit 0 only when A carried its line on RDMA.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "deadline.h"
#include "peer_util.h"

using namespace peer_util;
using tcp2rdma::transport::Deadline;

namespace {

constexpr size_t kOnB = size_t{512} << 10;  // one zero-copy message, within the 1 MiB ring
const std::string kLine = "still here";

StreamOptions options() {
  StreamOptions o;
  o.timeout_ms = 20000;
  return o;
}

int server(const char* port) {
  std::unique_ptr<StreamListener> listener = listen_on(port, options());
  if (!listener) return 1;
  std::unique_ptr<RdmaStream> a = accept_one(*listener);
  std::unique_ptr<RdmaStream> b = a ? accept_one(*listener) : nullptr;
  if (!b) return 1;
  std::vector<uint8_t> bytes(kOnB);
  fill(bytes.data(), bytes.size(), b->server_nonce(), 0);
  Status wrote = Status::kOk;
  size_t done = 0;
  std::thread writer([&] {
    iovec iov{bytes.data(), bytes.size()};
    wrote = b->write(&iov, 1, 0, &done);
  });
  auto posted = Deadline::in_ms(10000);
  while (b->counters().zcopy_bytes == 0 && !posted.passed()) std::this_thread::yield();
  write_work_file("abort-now", "posted");
  writer.join();
  std::printf("server: B's write returned %s with %zu of %zu bytes taken (peer aborted: %d)\n", to_string(wrote), done, kOnB, b->peer_aborted());
  iovec line{const_cast<char*>(kLine.data()), kLine.size()};
  size_t sent = 0;
  Status st = a->write(&line, 1, 0, &sent);
  if (st != Status::kOk || sent != kLine.size()) {
    std::fprintf(stderr, "server: A failed with B's abort: %s (%s)\n", to_string(st), a->failure_detail().c_str());
    return 1;
  }
  return wait_for_work_file("abort-checked", 60) ? 0 : 1;
}

int check(const char* host, const char* port) {
  std::unique_ptr<RdmaStream> a = connect_to(host, port, options());
  std::unique_ptr<RdmaStream> b = a ? connect_on_link(host, port, 20002, options()) : nullptr;
  if (!b) return 1;
  if (!b->opened_on_link()) {
    std::fprintf(stderr, "client: B did not open as a channel on A's link\n");
    return 1;
  }
  if (!wait_for_work_file("abort-now", 60)) {
    std::fprintf(stderr, "client: the server never wrote on B\n");
    return 1;
  }
  b->abort();
  std::string got(kLine.size(), '\0');
  iovec iov{got.data(), got.size()};
  size_t done = 0;
  Status st = a->read(&iov, 1, tcp2rdma::transport::kWaitAll, &done);
  got.resize(done);
  bool ok = st == Status::kOk && got == kLine;
  std::printf("client: A read \"%s\" (%s%s%s)\n", got.c_str(), to_string(st), ok ? "" : ": ",
              ok ? "" : a->failure_detail().c_str());
  write_work_file("abort-checked", ok ? "ok" : "failed");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "server") return server(argv[2]);
  if (argc == 4 && std::string_view(argv[1]) == "client") return check(argv[2], argv[3]);
  std::fprintf(stderr, "usage: zero_copy_abort server PORT | client ADDR PORT\n");
  return 2;
}
