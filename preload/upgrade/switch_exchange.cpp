#include "upgrade/switch_exchange.h"

#include <poll.h>
#include <sys/uio.h>

#include <array>
#include <optional>
#include <vector>

#include "libc/real_calls.h"
#include "registry/upgrade_session.h"
#include "rdma_stream.h"
#include "stream_sleeper.h"

namespace tcp2rdma::preload {
namespace {

using transport::Deadline;

// Exactly n bytes from the stream within the deadline: the peer's HELLO and ACK. *got: how many came.
bool stream_read_exact(transport::RdmaStream& stream, uint8_t* buf, size_t n, Deadline deadline, size_t* got) {
  // The wait sleeps as poll does (transport/stream_sleeper.h): news taken, a look, a sleep. Without a
  // subscription (no descriptor to be had) the sleep is short: we look again. The sleeper is this
  // call's (an eventfd made and closed a switch), not the thread's: a pool thread's would outlive the
  // switch, and in a child forked meanwhile LeakSanitizer reports what no thread there holds.
  transport::StreamSleeper sleeper;
  bool awake = sleeper.add(stream);
  std::vector<pollfd> sleep_on;
  *got = 0;
  while (*got < n) {
    sleeper.take_news();
    iovec iov{buf + *got, n - *got};
    size_t done = 0;
    transport::Status s = stream.read(&iov, 1, transport::kNonBlocking, &done);
    if (s == transport::Status::kOk) {
      if (done == 0) return false;  // the end of the stream
      *got += done;
      continue;
    }
    if (s != transport::Status::kWouldBlock) return false;
    if (deadline.passed()) return false;
    sleep_on.clear();
    sleeper.append_pollfds(&sleep_on);
    int ms = awake ? deadline.poll_ms() : UpgradeSession::poll_ms_for(-1, deadline.poll_ms());
    real().poll(sleep_on.data(), sleep_on.size(), ms);
    (void)stream.readiness();  // takes the link's events that woke us, handing out their completions
  }
  return true;
}

bool stream_write_all(transport::RdmaStream& stream, const uint8_t* buf, size_t n) {
  iovec iov{const_cast<uint8_t*>(buf), n};
  size_t done = 0;
  return stream.write(&iov, 1, 0, &done) == transport::Status::kOk && done == n;
}

}  // namespace

namespace {

// The peer's HELLO checked against what this side read of its TCP bytes: how many are left, or
// nullopt when it cannot be true. A client never says its TCP ended: its shutdown() keeps the
// connection on TCP (it could write no record after its end, and the server needs the client's record).
std::optional<uint64_t> left_after(const std::optional<Hello>& hello, uint64_t received, bool is_client,
                                   uint64_t tail_cap) {
  if (!hello || (hello->tcp_ended && !is_client)) return std::nullopt;
  return bytes_left_on_tcp(hello->tcp_bytes, received, tail_cap);
}

// A frame of the peer after our ACK (its ACK, or a client's restated HELLO): a failure here splits
// the counts, unless the peer gave up (an abort) before any byte of it.
SwitchStep read_after_ack(transport::RdmaStream& stream, Deadline deadline, std::array<uint8_t, kAckSize>* frame) {
  size_t got = 0;
  if (stream_read_exact(stream, frame->data(), frame->size(), deadline, &got)) return {};
  if (got == 0 && stream.peer_aborted()) {
    return {SwitchStep::kStaysTcp, "the peer gave up before its ACK (it ended the stream instead)"};
  }
  return {SwitchStep::kBroken, "the peer's ACK is missing"};
}

// A client's HELLO that came in its open says what it had sent when it opened: one that says fewer
// bytes than this side has read already is behind (its application wrote on), not a lie, and the
// client, frozen with more, restates it. Only a well-formed one: a client never says its TCP ended.
bool behind_what_we_read(const std::optional<Hello>& hello, uint64_t received) {
  return hello && !hello->tcp_ended && hello->tcp_bytes < received;
}

// The server's side of a restatement. `frame` was read where its client's ACK belongs; when it is a
// HELLO instead (the client's first came in its open), it takes the first's place: checked, ACKed,
// and the ACK read after it into `frame`. *restated says whether it was one.
SwitchStep take_restated(transport::RdmaStream& stream, uint64_t received, uint64_t tail_cap, Deadline deadline,
                         std::array<uint8_t, kAckSize>* frame, std::optional<Hello>* decoded,
                         std::optional<uint64_t>* left, bool* restated) {
  std::optional<Hello> hello = decode_hello(*frame);
  *restated = hello.has_value();
  if (!hello) return {};
  *decoded = hello;
  *left = left_after(hello, received, false, tail_cap);
  if (!*left) return {SwitchStep::kStaysTcp, "the peer's restated HELLO claims an impossible byte count"};
  auto ack = encode_ack(hello->tcp_bytes);
  if (!stream_write_all(stream, ack.data(), ack.size())) {
    return {SwitchStep::kStaysTcp, "the RDMA connection failed at ACK"};
  }
  return read_after_ack(stream, deadline, frame);
}

}  // namespace

SwitchStep exchange_counts(transport::RdmaStream& stream, const Hello& ours, uint64_t received, bool is_client,
                           uint64_t tail_cap, Deadline deadline, Deadline ack_deadline, const Hello* in_open,
                           Hello* peer, uint64_t* tail) {
  bool restate = in_open != nullptr && *in_open != ours;
  if (in_open == nullptr || restate) {
    auto hello = encode_hello(ours);
    if (!stream_write_all(stream, hello.data(), hello.size())) {
      return {SwitchStep::kStaysTcp, "the RDMA connection failed at HELLO"};
    }
  }
  std::array<uint8_t, kHelloSize> peer_hello{};
  size_t got = 0;
  if (!stream_read_exact(stream, peer_hello.data(), peer_hello.size(), deadline, &got)) {
    return {SwitchStep::kStaysTcp, "no HELLO from the peer"};
  }
  std::optional<Hello> decoded = decode_hello(peer_hello);
  std::optional<uint64_t> left = left_after(decoded, received, is_client, tail_cap);
  bool from_open = !is_client && stream.first_bytes_in_open();
  bool behind = !left && from_open && behind_what_we_read(decoded, received);
  if (!left && !behind) {
    return {SwitchStep::kStaysTcp, "the peer's HELLO is malformed or claims an impossible byte count"};
  }
  // A HELLO behind is ACKed as it is: the client skips that ACK, since it restates.
  auto ack = encode_ack(decoded->tcp_bytes);
  if (!stream_write_all(stream, ack.data(), ack.size())) {
    return {SwitchStep::kStaysTcp, "the RDMA connection failed at ACK"};
  }
  std::array<uint8_t, kAckSize> frame{};
  if (SwitchStep step = read_after_ack(stream, ack_deadline, &frame); step.kind != SwitchStep::kGoOn) return step;
  if (restate) {
    // The server's ACK of the count our open carried: superseded by the one of our restated HELLO.
    if (decode_ack(frame) != in_open->tcp_bytes) return {SwitchStep::kBroken, "the peer's ACK of our open is wrong"};
    if (SwitchStep step = read_after_ack(stream, ack_deadline, &frame); step.kind != SwitchStep::kGoOn) return step;
  } else if (from_open) {
    bool restated = false;
    SwitchStep step = take_restated(stream, received, tail_cap, ack_deadline, &frame, &decoded, &left, &restated);
    if (step.kind != SwitchStep::kGoOn) return step;
    // Its open's count is behind what we read, and it says it holds: the counts are split.
    if (behind && !restated) {
      return {SwitchStep::kBroken, "the peer's HELLO in its open is behind what we read, not restated"};
    }
  }
  if (decode_ack(frame) != ours.tcp_bytes) return {SwitchStep::kBroken, "the peer's ACK does not echo our byte count"};
  *peer = *decoded;
  *tail = *left;
  return {};
}

}  // namespace tcp2rdma::preload
