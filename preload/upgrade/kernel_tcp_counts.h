// The kernel's own count of the bytes a TCP socket has moved each way, every byte since the
// connection began, whoever wrote or read it: the application, a switch's record, a failover's resend.
// Two peers' counts meet (what one wrote is what the other read, once both are quiet), so they can
// say where a connection stands on TCP when neither side's module counted every call (a connection
// that came back from RDMA and goes there again).
#pragma once

#include <cstdint>

namespace tcp2rdma::preload {

struct KernelTcpCounts {
  uint64_t written = 0;  // taken by the kernel: acknowledged by the peer, plus still queued
  uint64_t read = 0;     // received in order, less what still waits to be read
};

// Two getsockopt(TCP_INFO) around two ioctls (SIOCOUTQ, SIOCINQ), again while an acknowledgement or
// a segment came between them (at most 8 tries); false when the kernel gives no such counts or they
// never held still (then nothing is written to *out). Exact only while no call of the application
// moves bytes on the socket (a switch's freeze). Each FIN's sequence number is left out (from the TCP
// state). The active opener's SYN is not: Linux counts it in bytes_acked on the connecting side
// (written: one more than the bytes), and callers that compare the counts with their own learn that
// difference when both are known (the first switch).
bool kernel_tcp_counts(int fd, KernelTcpCounts* out) noexcept;

}  // namespace tcp2rdma::preload
