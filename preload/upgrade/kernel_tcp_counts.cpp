#include "upgrade/kernel_tcp_counts.h"

// linux/tcp.h, not netinet/tcp.h: glibc's struct tcp_info stops before the byte counts.
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <linux/tcp.h>
#include <sys/socket.h>

#include <cstddef>

#include "libc/real_calls.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {
// The kernel's TCP states (include/net/tcp_states.h), which no header of user space beside
// linux/tcp.h's struct tcp_info names.
constexpr uint8_t kEstablished = 1, kFinWait1 = 4, kFinWait2 = 5, kCloseWait = 8;

// One TCP_INFO read: false when the kernel gives none, or a struct too short for the counts (kernels
// before 4.1 and 4.2 added them).
bool read_info(int fd, tcp_info* info) {
  socklen_t len = sizeof *info;
  if (real().getsockopt(fd, IPPROTO_TCP, TCP_INFO, info, &len) != 0) return false;
  return len >= offsetof(tcp_info, tcpi_bytes_received) + sizeof info->tcpi_bytes_received;
}

}  // namespace

bool kernel_tcp_counts(int fd, KernelTcpCounts* out) noexcept {
  SavedErrno keep;
  // The counts and the queues are read by separate calls, and an acknowledgement or a segment that
  // arrives between them moves one and not the other: the reads are taken as they are only when
  // TCP_INFO says the same before and after the queues' (a few tries; the peer keeps sending).
  for (int attempt = 0; attempt < 8; ++attempt) {
    tcp_info before{}, after{};
    int unacked = 0, unread = 0;
    if (!read_info(fd, &before)) return false;
    if (real().ioctl(fd, SIOCOUTQ, &unacked) != 0 || real().ioctl(fd, SIOCINQ, &unread) != 0) return false;
    if (!read_info(fd, &after)) return false;
    if (before.tcpi_bytes_acked != after.tcpi_bytes_acked ||
        before.tcpi_bytes_received != after.tcpi_bytes_received || before.tcpi_state != after.tcpi_state) {
      continue;
    }
    if (unacked < 0 || unread < 0 || static_cast<uint64_t>(unread) > after.tcpi_bytes_received) return false;
    // A FIN takes a sequence number, which the counts take in: ours once it is queued, the peer's once
    // it arrived (SIOCINQ already leaves it out of what waits to be read). In the states past these
    // (a socket closed both ways) which FIN went where is not known: no counts.
    bool fin_sent, fin_received;
    switch (after.tcpi_state) {
      case kEstablished: fin_sent = false, fin_received = false; break;
      case kCloseWait: fin_sent = false, fin_received = true; break;
      case kFinWait1:
      case kFinWait2: fin_sent = true, fin_received = false; break;
      default: return false;
    }
    out->written = after.tcpi_bytes_acked + static_cast<uint64_t>(unacked) - (fin_sent ? 1 : 0);
    out->read = after.tcpi_bytes_received - static_cast<uint64_t>(unread) - (fin_received ? 1 : 0);
    return true;
  }
  return false;
}

}  // namespace tcp2rdma::preload
