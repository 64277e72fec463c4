// stream_failover: the transport's half of going on over TCP when the RDMA path fails (docs/protocol.md,
// "When the RDMA path fails"), run in the Soft-RoCE pair while the wire is cut for longer than RC's
// retries. Each side has a TCP connection and a stream beside it, and writes its stream (SEED from the
// client, SEED+1 from the server, random sizes, zero-copy ones among them) for SECONDS while reading
// and checking the other's. When the stream fails on its path, the side stops it, tells the peer on
// TCP how far it has received and where its own stream ends, takes the peer's word (checked by
// path_failover.h), resends what the peer lacks and carries on over TCP: the reader checks every byte,
// from the stream, from what was left unread in it, from the peer's resend and from TCP after.
//   stream_failover server PORT SEED SECONDS      TCP on PORT, the stream on PORT+1
//   stream_failover client ADDR PORT SEED SECONDS
// Each says so in $T2R_WORK/connected-<role> once its stream is up. Each writes "<role> sent N" to
// $T2R_WORK/sent-<role> and, once the peer's end has come, compares
// what it received with the peer's file. Exit 0 only when both directions are exact and the path did
// fail over (a run the cut missed proves nothing).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "peer_util.h"

using namespace peer_util;
using tcp2rdma::transport::bytes_coming;
using tcp2rdma::transport::FailoverError;

namespace {

struct Side {
  const char* role = "";
  int tcp = -1;
  std::unique_ptr<RdmaStream> stream;
  uint64_t seed_out = 0, seed_in = 0;
  // The failover, once, by whichever thread finds the path failed first.
  std::mutex mu;
  std::condition_variable done_cv;
  bool tried = false, done = false, ok = false;
  std::vector<uint8_t> unread;  // the peer's bytes left unread on the stream: read before TCP's
};

bool tcp_all(int fd, uint8_t* buf, size_t n, bool sending) {
  for (size_t done = 0; done < n;) {
    ssize_t r = sending ? send(fd, buf + done, n - done, MSG_NOSIGNAL) : recv(fd, buf + done, n - done, 0);
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

// The exchange: our received and sent cursors, the peer's; the resend. The peer's resend is the first
// thing on TCP after its record, so the reader reads it as TCP's bytes, after `unread`.
bool fail_over(Side& side) {
  RdmaStream::PathEnd end = side.stream->stop_path();
  uint64_t ours[2] = {end.received.received, end.sent.sent};
  uint64_t peer[2] = {0, 0};
  if (!tcp_all(side.tcp, reinterpret_cast<uint8_t*>(ours), sizeof ours, true) ||
      !tcp_all(side.tcp, reinterpret_cast<uint8_t*>(peer), sizeof peer, false)) {
    std::fprintf(stderr, "%s: the exchange on TCP failed\n", side.role);
    return false;
  }
  uint64_t coming = 0;
  if (FailoverError e = bytes_coming(end.received, peer[1], &coming); e != FailoverError::kNone) {
    std::fprintf(stderr, "%s: the peer's end: %s\n", side.role, to_string(e));
    return false;
  }
  std::vector<uint8_t> resend;
  FailoverError why = FailoverError::kNone;
  if (side.stream->leave_path(peer[0], &side.unread, &resend, &why) != Status::kOk) {
    std::fprintf(stderr, "%s: the peer's claim: %s\n", side.role, to_string(why));
    return false;
  }
  // The ring is small (64 KiB): both resends fit in TCP's buffers, so neither waits for the other.
  if (!tcp_all(side.tcp, resend.data(), resend.size(), true)) return false;
  side.stream->finish_leaving();
  std::printf("%s: fell back to TCP (%s): %zu bytes left unread on the stream, %zu resent, %llu coming\n",
              side.role, side.stream->failure_detail().c_str(), side.unread.size(), resend.size(), ull(coming));
  return true;
}

// Runs the failover once; every caller waits for it and learns whether it worked.
bool failed_over(Side& side) {
  std::unique_lock lock(side.mu);
  if (!side.tried) {
    side.tried = true;
    lock.unlock();
    bool ok = side.stream->path_failed() && fail_over(side);
    lock.lock();
    side.ok = ok;
    side.done = true;
    side.done_cv.notify_all();
  }
  side.done_cv.wait(lock, [&] { return side.done; });
  return side.ok;
}

size_t piece_size(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0: return 1 + rng() % 100;          // inline
    case 1: return 1 + rng() % 16000;        // bounce
    case 2: return 65536 + rng() % 200000;   // zero-copy
    default: return 1 + rng() % 70000;
  }
}

// Writes for `seconds`, on the stream and then, after a failover, on TCP; returns the bytes written.
uint64_t write_for(Side& side, int seconds, bool* ok) {
  std::mt19937_64 rng(side.seed_out);
  std::vector<uint8_t> buf(300000);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  uint64_t pos = 0;
  bool on_tcp = false;
  *ok = true;
  while (std::chrono::steady_clock::now() < until) {
    size_t n = piece_size(rng);
    fill(buf.data(), n, side.seed_out, pos);
    for (size_t done = 0; done < n;) {
      if (on_tcp) {
        if (!tcp_all(side.tcp, buf.data() + done, n - done, true)) *ok = false;
        done = n;
        break;
      }
      iovec iov{buf.data() + done, n - done};
      size_t took = 0;
      Status st = side.stream->write(&iov, 1, 0, &took);
      done += took;
      if (st == Status::kOk) continue;
      if (!failed_over(side)) {
        std::fprintf(stderr, "%s: write at %llu: %s, no failover\n", side.role, ull(pos + done), to_string(st));
        *ok = false;
        return pos + done;
      }
      on_tcp = true;  // what the stream took is resent if the peer lacks it; the rest goes on TCP
    }
    if (!*ok) return pos;
    pos += n;
  }
  if (on_tcp) {
    shutdown(side.tcp, SHUT_WR);
  } else {
    side.stream->shutdown_write();
  }
  return pos;
}

bool check(Side& side, const uint8_t* buf, size_t n, uint64_t pos) {
  if (size_t bad = first_difference(buf, n, side.seed_in, pos); bad != n) {
    std::fprintf(stderr, "%s: byte %llu differs\n", side.role, ull(pos + bad));
    return false;
  }
  return true;
}

// Reads and checks until the peer's end, from the stream, then (after a failover) from what the stream
// left unread and from TCP; returns the bytes read.
uint64_t read_all(Side& side, bool* ok) {
  std::vector<uint8_t> buf(1 << 20);
  uint64_t pos = 0;
  *ok = true;
  for (;;) {
    iovec iov{buf.data(), buf.size()};
    size_t done = 0;
    Status st = side.stream->read(&iov, 1, 0, &done);
    if (st == Status::kOk && done == 0) return pos;  // the end, on the stream
    if (st == Status::kOk) {
      if (!check(side, buf.data(), done, pos)) break;
      pos += done;
      continue;
    }
    if (!failed_over(side)) {
      std::fprintf(stderr, "%s: read at %llu: %s, no failover\n", side.role, ull(pos), to_string(st));
      break;
    }
    if (!check(side, side.unread.data(), side.unread.size(), pos)) break;
    pos += side.unread.size();
    for (;;) {
      ssize_t r = recv(side.tcp, buf.data(), buf.size(), 0);
      if (r == 0) return pos;
      if (r < 0 || !check(side, buf.data(), static_cast<size_t>(r), pos)) break;
      pos += static_cast<uint64_t>(r);
    }
    break;
  }
  *ok = false;
  return pos;
}

std::string work_file(const char* name) {
  const char* work = std::getenv("T2R_WORK");
  return std::string(work != nullptr ? work : "/tmp") + "/" + name;
}

// The guest's uptime, the clock wire_cut.sh logs its cut by.
std::string uptime() {
  std::string up = "?";
  std::ifstream("/proc/uptime") >> up;
  return up;
}

int run(Side& side, int seconds) {
  // The wire is cut only once both streams are up (wire_cut.sh waits for both files): a cut during
  // setup would fail the setup, not test the failover.
  std::ofstream(work_file((std::string("connected-") + side.role).c_str())) << "up\n";
  bool write_ok = false, read_ok = false;
  uint64_t sent = 0;
  std::fprintf(stderr, "%s: stream up at %s\n", side.role, uptime().c_str());
  std::thread writer([&] { sent = write_for(side, seconds, &write_ok); });
  uint64_t received = read_all(side, &read_ok);
  writer.join();
  std::fprintf(stderr, "%s: both directions ended at %s\n", side.role, uptime().c_str());
  std::ofstream(work_file((std::string("sent-") + side.role).c_str())) << sent << "\n";
  const char* peer_role = std::string_view(side.role) == "server" ? "client" : "server";
  uint64_t peer_sent = 0;
  for (int i = 0; i < 600 && peer_sent == 0; ++i) {
    std::ifstream((work_file((std::string("sent-") + peer_role).c_str()))) >> peer_sent;
    if (peer_sent == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  uint64_t on_stream = side.stream->counters().bytes_sent;
  std::printf("%s: sent %llu (%llu of them on the stream), received %llu of the %llu the peer sent; failed over: %s\n",
              side.role, ull(sent), ull(on_stream), ull(received), ull(peer_sent), side.done && side.ok ? "yes" : "no");
  return write_ok && read_ok && received == peer_sent && side.done && side.ok && on_stream > 0 ? 0 : 1;
}

StreamOptions small_ring() {
  StreamOptions options;
  options.ring_size_log2 = 16;
  options.recv_queue_depth = 8;
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string_view mode = argc > 1 ? argv[1] : "";
  Side side;
  char rdma_port[16];
  if (argc == 5 && mode == "server") {
    side.role = "server";
    side.seed_out = std::strtoull(argv[3], nullptr, 10) + 1;
    side.seed_in = side.seed_out - 1;
    std::snprintf(rdma_port, sizeof rdma_port, "%d", std::atoi(argv[2]) + 1);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr = ipv4(nullptr, argv[2]);
    if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 1) != 0) return 1;
    std::unique_ptr<StreamListener> rdma = listen_on(rdma_port, small_ring());
    if (!rdma) return 1;
    std::fprintf(stderr, "listening\n");
    side.tcp = accept(listener, nullptr, nullptr);
    side.stream = accept_one(*rdma);
    if (side.tcp < 0 || !side.stream) return 1;
    return run(side, std::atoi(argv[4]));
  }
  if (argc == 6 && mode == "client") {
    side.role = "client";
    side.seed_out = std::strtoull(argv[4], nullptr, 10);
    side.seed_in = side.seed_out + 1;
    std::snprintf(rdma_port, sizeof rdma_port, "%d", std::atoi(argv[3]) + 1);
    side.tcp = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = ipv4(argv[2], argv[3]);
    if (connect(side.tcp, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 1;
    side.stream = connect_to(argv[2], rdma_port, small_ring());
    if (!side.stream) return 1;
    return run(side, std::atoi(argv[5]));
  }
  std::fprintf(stderr, "usage: see the comment at the top of stream_failover.cpp\n");
  return 2;
}
