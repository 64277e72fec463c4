#include "process/fork_channel.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "registry/tcp_prefix.h"

namespace tcp2rdma::preload {
namespace {

constexpr uint32_t kMagic = 0x4b524f46;  // "FORK"
enum : uint8_t { kClaimKind = 1, kAnswerKind = 2, kAskKind = 3 };
// kSharedPrefix: the memfd is the parent's prefix mapping (TcpPrefix::set_shared), not bare bytes.
// kReading, on a claim: the call that claims only reads.
enum : uint8_t { kThenEnd = 1, kWriteShut = 2, kAlone = 4, kSharedPrefix = 8, kReading = 16 };

// One message: this header, and with an answer that carries bytes, one memfd holding exactly `size`;
// with kRelayed, the relay's queue (a memfd) and its eventfd.
struct Wire {
  uint32_t magic;
  uint8_t kind;
  uint8_t outcome;
  uint8_t flags;
  uint8_t reserved;
  uint64_t serial;
  uint64_t size;
};
static_assert(sizeof(Wire) == 24);

bool send_wire(int channel, const Wire& wire, int memfd, int wake = -1) noexcept {
  iovec iov{const_cast<Wire*>(&wire), sizeof wire};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  if (memfd >= 0) {
    int fds[2] = {memfd, wake};
    size_t n = wake >= 0 ? 2 : 1;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, n * sizeof(int));
  }
  for (;;) {
    ssize_t n = real().sendmsg(channel, &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof wire)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

// The bytes in a new memfd, or -1.
int bytes_in_memfd(const std::vector<uint8_t>& bytes) noexcept {
  int mfd = static_cast<int>(memfd_create("tcp2rdma-handback", MFD_CLOEXEC));
  if (mfd < 0) return -1;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = pwrite(mfd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      real().close(mfd);
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  return mfd;
}

// Exactly `size` bytes of memfd, or false.
bool read_memfd(int mfd, uint64_t size, std::vector<uint8_t>* bytes) noexcept {
  struct stat st{};
  if (fstat(mfd, &st) != 0 || static_cast<uint64_t>(st.st_size) != size) return false;
  try {
    bytes->resize(size);
  } catch (const std::bad_alloc&) {
    return false;
  }
  size_t done = 0;
  while (done < size) {
    ssize_t n = pread(mfd, bytes->data() + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool open_fork_channel(int ends[2]) noexcept {
  return socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) == 0;
}

bool send_claim(int channel, uint64_t serial, bool reading) noexcept {
  return send_wire(channel, Wire{kMagic, kClaimKind, 0, static_cast<uint8_t>(reading ? kReading : 0), 0, serial, 0}, -1);
}

bool send_ask(int channel, uint64_t serial) noexcept {
  return send_wire(channel, Wire{kMagic, kAskKind, 0, 0, 0, serial, 0}, -1);
}

bool send_answer(int channel, uint64_t serial, const HandBack& answer) noexcept {
  bool shared = answer.shared_prefix != nullptr;
  uint8_t flags = (answer.then_end ? kThenEnd : 0) | (answer.write_shut ? kWriteShut : 0) | (answer.alone ? kAlone : 0) |
                  (shared ? kSharedPrefix : 0);
  Wire wire{kMagic, kAnswerKind, static_cast<uint8_t>(answer.outcome), flags, 0, serial, shared ? 0 : answer.bytes.size()};
  int mfd = shared ? *answer.shared_prefix : -1;
  if (!shared && !answer.bytes.empty() && (mfd = bytes_in_memfd(answer.bytes)) < 0) return false;
  bool relayed = answer.outcome == HandBack::Outcome::kRelayed;
  if (relayed && (!shared || !answer.relay_wake)) return false;
  bool sent = send_wire(channel, wire, mfd, relayed ? *answer.relay_wake : -1);
  if (!shared && mfd >= 0) real().close(mfd);  // the message holds its own reference until it is read
  return sent;
}

ChannelMessage receive_message(int channel, int timeout_ms, uint64_t* serial, HandBack* answer) noexcept {
  pollfd p{channel, POLLIN, 0};
  int ready;
  while ((ready = real().poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  if (ready == 0) return ChannelMessage::kNone;
  if (ready < 0) return ChannelMessage::kClosed;
  Wire wire{};
  iovec iov{&wire, sizeof wire};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  while ((n = real().recvmsg(channel, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT)) < 0 && errno == EINTR) {
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ChannelMessage::kNone;
  int mfd = -1, wake = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    if (c->cmsg_len == CMSG_LEN(sizeof(int))) std::memcpy(&mfd, CMSG_DATA(c), sizeof mfd);
    if (c->cmsg_len == CMSG_LEN(2 * sizeof(int))) {
      std::memcpy(&mfd, CMSG_DATA(c), sizeof mfd);
      std::memcpy(&wake, CMSG_DATA(c) + sizeof(int), sizeof wake);
    }
  }
  auto closed = [&] {
    if (mfd >= 0) real().close(mfd);
    if (wake >= 0) real().close(wake);
    return ChannelMessage::kClosed;
  };
  if (n != static_cast<ssize_t>(sizeof wire) || wire.magic != kMagic || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    return closed();
  }
  *serial = wire.serial;
  if (wire.kind == kClaimKind && mfd < 0) {
    answer->outcome = (wire.flags & kReading) != 0 ? HandBack::Outcome::kRelayed : HandBack::Outcome::kGone;
    return ChannelMessage::kClaim;
  }
  if (wire.kind == kAskKind && mfd < 0) return ChannelMessage::kAsk;
  if (wire.kind != kAnswerKind || wire.outcome > static_cast<uint8_t>(HandBack::Outcome::kRelayed)) return closed();
  bool relayed = wire.outcome == static_cast<uint8_t>(HandBack::Outcome::kRelayed);
  if (relayed != (wake >= 0)) return closed();
  answer->outcome = static_cast<HandBack::Outcome>(wire.outcome);
  answer->then_end = (wire.flags & kThenEnd) != 0;
  answer->write_shut = (wire.flags & kWriteShut) != 0;
  answer->alone = (wire.flags & kAlone) != 0 && answer->outcome == HandBack::Outcome::kMoved;
  answer->bytes.clear();
  answer->shared_prefix.reset();
  answer->relay_wake.reset();
  if ((wire.flags & kSharedPrefix) != 0) {
    bool kind_ok = answer->outcome == HandBack::Outcome::kMoved || relayed;
    if (mfd < 0 || wire.size != 0 || !kind_ok) return closed();
    {
      transport::OwnDescriptors window;  // kept while the prefix lives: not a number of the application's
      mfd = window.place(mfd);
      if (wake >= 0) wake = window.place(wake);
      if (mfd < 0 || (relayed && wake < 0)) return closed();
    }
    try {
      answer->shared_prefix = hold_memfd(std::exchange(mfd, -1));
      if (relayed) answer->relay_wake = hold_memfd(std::exchange(wake, -1));
    } catch (const std::bad_alloc&) {
      return closed();
    }
    return ChannelMessage::kAnswer;
  }
  if (relayed) return closed();
  if ((wire.size > 0) != (mfd >= 0)) return closed();
  if (mfd >= 0) {
    bool read = read_memfd(mfd, wire.size, &answer->bytes);
    real().close(mfd);
    if (!read) return ChannelMessage::kClosed;
  }
  return ChannelMessage::kAnswer;
}

}  // namespace tcp2rdma::preload
