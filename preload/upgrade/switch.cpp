#include "deadline.h"
#include "upgrade/switch.h"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "back_to_tcp/path_watcher.h"
#include "libc/real_calls.h"
#include "rdma_stream.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "upgrade/kernel_tcp_counts.h"
#include "upgrade/switch_exchange.h"
#include "upgrade/switch_frames.h"
#include "util/log.h"

namespace tcp2rdma::preload {
namespace {

using transport::Deadline;

// The switch itself: both peers are tcp2rdma by then and neither waits on its application, so it takes
// a few round trips and the reading of what TCP still has in flight.
constexpr std::chrono::milliseconds kSwitchTimeout{10000};
// The most application bytes one TCP connection can still have in flight when its peer freezes: its
// send buffer and our receive buffer, each at most the kernel's tcp_wmem / tcp_rmem maximum (doubled:
// setsockopt's sizes are), read from this host and taken for the peer's too. A HELLO claiming more
// is refused: the tail is read into memory before the stream is used, and the peer must not choose
// how much of our memory it takes.
uint64_t max_tcp_tail() {
  static const uint64_t bound = [] {
    auto third = [](const char* path) -> uint64_t {
      unsigned long long a = 0, b = 0, c = 0;
      FILE* f = std::fopen(path, "re");
      if (f == nullptr) return 0;
      int n = std::fscanf(f, "%llu %llu %llu", &a, &b, &c);
      std::fclose(f);
      return n == 3 ? c : 0;
    };
    uint64_t r = third("/proc/sys/net/ipv4/tcp_rmem"), w = third("/proc/sys/net/ipv4/tcp_wmem");
    if (r == 0 || w == 0) return uint64_t{32} << 20;
    return std::max<uint64_t>(2 * (r + w), uint64_t{8} << 20);
  }();
  return bound;
}

// How an exchange of bytes on the TCP socket ended: done, or why not, after how many bytes.
struct TcpResult {
  enum Kind { kDone, kEnded, kFailed, kTimedOut } kind = kDone;
  size_t done = 0;
  int error = 0;
  bool ok() const { return kind == kDone; }
};

// Exactly n bytes to or from the TCP socket within the deadline, whatever its O_NONBLOCK.
TcpResult tcp_exchange(int fd, uint8_t* buf, size_t n, bool sending, Deadline deadline) {
  TcpResult r;
  while (r.done < n) {
    if (deadline.passed()) {
      r.kind = TcpResult::kTimedOut;
      return r;
    }
    pollfd p{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    if (real().poll(&p, 1, deadline.poll_ms()) <= 0) continue;
    ssize_t got = sending ? real().send(fd, buf + r.done, n - r.done, MSG_DONTWAIT | MSG_NOSIGNAL)
                          : real().recv(fd, buf + r.done, n - r.done, MSG_DONTWAIT);
    if (got == 0 && !sending) {
      r.kind = TcpResult::kEnded;
      return r;
    }
    if (got < 0 && errno != EAGAIN && errno != EINTR) {
      r.kind = TcpResult::kFailed;
      r.error = errno;
      return r;
    }
    if (got > 0) r.done += static_cast<size_t>(got);
  }
  return r;
}

// A failed exchange in words, for the log line: what ended it, after how many of the n bytes.
std::string tcp_words(const TcpResult& r, size_t n) {
  char how[96];
  if (r.kind == TcpResult::kFailed) {
    snprintf(how, sizeof how, "TCP failed (%s)", strerror(r.error));
  } else {
    snprintf(how, sizeof how, "%s",
             r.kind == TcpResult::kEnded ? "the TCP connection ended" : "nothing more came on TCP within the switch's time");
  }
  char text[160];
  snprintf(text, sizeof text, "%s after %zu of %zu bytes", how, r.done, n);
  return text;
}

// True when the TCP connection is at its end (the peer shut its sending side down) within the
// deadline; false when a byte comes instead, or an error.
bool tcp_at_end(int fd, Deadline deadline) {
  for (;;) {
    if (deadline.passed()) return false;
    pollfd p{fd, POLLIN, 0};
    if (real().poll(&p, 1, deadline.poll_ms()) <= 0) continue;
    uint8_t byte = 0;
    ssize_t r = real().recv(fd, &byte, 1, MSG_DONTWAIT);
    if (r == 0) return true;
    if (r > 0 || (errno != EAGAIN && errno != EINTR)) return false;
  }
}

using Step = SwitchStep;

// The peer's application bytes still on TCP (into *bytes), then what must follow them: its record,
// checked against this stream's nonces, or, when its HELLO said so, the end of its TCP stream. Not a
// record, or another connection's: whoever holds this RDMA connection is not the peer of this TCP
// connection. Never guessed at: the connection is reset.
Step read_peer_tail(int fd, uint64_t tail, bool peer_ended, const NoncePair& nonces, Deadline deadline,
                    std::vector<uint8_t>* bytes) {
  bytes->resize(tail);
  if (TcpResult r = tcp_exchange(fd, bytes->data(), bytes->size(), false, deadline); !r.ok()) {
    return {Step::kBroken, "the peer's last bytes on TCP did not come", tcp_words(r, bytes->size())};
  }
  if (peer_ended) {
    if (!tcp_at_end(fd, deadline)) return {Step::kBroken, "bytes on TCP after the end the peer announced"};
    return {};
  }
  std::array<uint8_t, kRecordSize> record{};
  if (TcpResult r = tcp_exchange(fd, record.data(), record.size(), false, deadline); !r.ok()) {
    char words[200];
    snprintf(words, sizeof words, "%s, after its %llu last bytes", tcp_words(r, record.size()).c_str(),
             static_cast<unsigned long long>(tail));
    return {Step::kBroken, "the peer's switch record did not come on TCP", words};
  }
  if (check_record(record, nonces) != RecordCheck::kProven) {
    return {Step::kBroken, "the peer's switch record did not match this connection"};
  }
  return {};
}


// The kernel's counts against the session's, which saw every application call on TCP: they may differ
// by the connecting side's SYN alone (kernel_tcp_counts.h). Otherwise the kernel's cannot stand in for
// the session's on this system, and the log says so: the kernel's are what a connection that comes
// back from RDMA can go by.
void compare_with_kernel(int fd, uint64_t sent, uint64_t received, bool is_client, const char* label) {
  KernelTcpCounts k;
  if (!kernel_tcp_counts(fd, &k)) return;
  if (k.written == sent + (is_client ? 1 : 0) && k.read == received) return;
  log_line("%s: the kernel's tcp counts differ from the session's: written %llu (session %llu), read %llu "
           "(session %llu)",
           label, static_cast<unsigned long long>(k.written), static_cast<unsigned long long>(sent),
           static_cast<unsigned long long>(k.read), static_cast<unsigned long long>(received));
}

}  // namespace

// The switch (docs/architecture.md, "The byte-exact switch"): freeze, HELLO and ACK on the stream;
// the client writes its record on TCP right after its last application byte; the server reads the
// client's remaining TCP bytes and its record, and only then writes its own (or, when its application
// had already ended its TCP sending side, nothing: the TCP end marks the boundary), which the client
// reads the same way. The TCP bytes read by the switch go ahead of the stream's (its prefix).
UpgradeOutcome switch_onto(int fd, TrackedSocket* socket, UpgradeSession* session,
                           std::unique_ptr<transport::RdmaStream> stream, bool is_client, const Hello* in_open,
                           const AskAgain& ask_again) {
  Hello ours;
  uint64_t received = 0;
  if (!session->freeze(&ours.tcp_bytes, &received, &ours.tcp_ended)) {
    // Deferred by a fork after its client's request was answered: that client waits in its switch,
    // and the process that uses the connection next waits for a request from it.
    if (!is_client && session->deferred()) {
      log_line("%s: the process forked before the switch: its client is asked again", session->label());
      stream->abort_asking_again();
      return {false, true, "the process forked before the switch: its client asks again",
              stats::TcpReason::kClosedEarly};
    }
    stream->abort();
    return {false, true, "closed, or the process forked or ran another program, before the switch",
            stats::TcpReason::kClosedEarly};
  }
  if (session->returning()) {
    // Back to RDMA: the TCP stream holds bytes no session counted (the first switch's records, the
    // bytes of the time on TCP, a failover's resends). The kernel's totals count them all, at both ends.
    KernelTcpCounts k;
    if (!kernel_tcp_counts(fd, &k) || (is_client && k.written == 0)) {
      stream->abort();
      return {false, true, "the kernel's tcp counts did not hold still", stats::TcpReason::kSwitchFailed};
    }
    ours.tcp_bytes = k.written - (is_client ? 1 : 0);  // the connecting side's SYN
    received = k.read;
  } else {
    compare_with_kernel(fd, ours.tcp_bytes, received, is_client, session->label());
  }
  auto deadline = Deadline::in(kSwitchTimeout);
  // From our ACK on, longer: a peer whose wait for our HELLO ran out on a stalled link must still be
  // heard giving up (switch_exchange.h). It started before its HELLO reached us, so before our HELLO
  // wait ended: it gives up by 2 x kSwitchTimeout after our start, and its abort has the third to
  // arrive. A peer whose ACK came late still reads and writes the records.
  auto after_ack = Deadline::in(3 * kSwitchTimeout);
  Hello peer;
  uint64_t tail = 0;
  std::vector<uint8_t> tcp_tail;
  Step step = exchange_counts(*stream, ours, received, is_client, max_tcp_tail(), deadline, after_ack, in_open, &peer,
                              &tail);
  if (step.kind == Step::kStaysTcp && ask_again && stream->peer_asked_again()) {
    // Nothing of the switch happened on either side (no HELLO came, no record went): once more, on
    // the new request's stream, from the same frozen counts.
    stream->abort();
    stream = ask_again(ours);
    if (stream == nullptr) {
      return {false, true, "the server asked again, and the new request was not answered", stats::TcpReason::kPeerDeclined};
    }
    log_line("%s: the server's process forked before the switch: it asked for a new request", session->label());
    deadline = Deadline::in(kSwitchTimeout);
    after_ack = Deadline::in(3 * kSwitchTimeout);
    const Hello* carried = stream->first_bytes_in_open() ? &ours : nullptr;
    step = exchange_counts(*stream, ours, received, is_client, max_tcp_tail(), deadline, after_ack, carried, &peer,
                           &tail);
  }
  NoncePair nonces = nonce_pair(stream->client_nonce(), stream->server_nonce());
  auto record = encode_record(nonces);
  if (step.kind == Step::kGoOn && is_client) {
    if (TcpResult r = tcp_exchange(fd, record.data(), record.size(), true, after_ack); !r.ok()) {
      step = {Step::kBroken, "could not write the switch record on TCP", tcp_words(r, record.size())};
    }
  }
  if (step.kind == Step::kGoOn) step = read_peer_tail(fd, tail, peer.tcp_ended, nonces, after_ack, &tcp_tail);
  if (step.kind == Step::kGoOn && !is_client && !ours.tcp_ended) {
    if (TcpResult r = tcp_exchange(fd, record.data(), record.size(), true, after_ack); !r.ok()) {
      step = {Step::kBroken, "could not write the switch record on TCP", tcp_words(r, record.size())};
    }
  }
  // Our application ended its sending side on TCP: the stream's sending side ends too, so that the
  // peer reads the end right after our last bytes.
  if (step.kind == Step::kGoOn && ours.tcp_ended && stream->shutdown_write() != transport::Status::kOk) {
    step = {Step::kBroken, "the RDMA connection failed at the end of our sending side"};
  }
  if (step.kind != Step::kGoOn) {
    UpgradeOutcome failed{false, step.kind == Step::kStaysTcp, step.why, stats::TcpReason::kSwitchFailed};
    // What failed, in words: the TCP side's account, or the stream's; a stream that did not fail but
    // did not bring the peer's HELLO or ACK either says where its bytes were, so that one that never
    // came reads differently from one that came unnoticed.
    failed.detail = !step.detail.empty() ? step.detail : stream->failure_detail();
    if (failed.detail.empty()) failed.detail = stream->flow_summary();
    stream->abort();
    return failed;
  }
  stream->set_unread_prefix(std::move(tcp_tail));
  int fl = real().fcntl(fd, F_GETFL);
  socket->nonblocking.store(fl >= 0 && (fl & O_NONBLOCK), std::memory_order_relaxed);
  socket->set_stream(std::move(stream));
  watch_path(socket, fd);  // from now on a failed path carries the connection on over TCP
  return {true, true, ""};
}

}  // namespace tcp2rdma::preload
