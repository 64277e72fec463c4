#include "stats_view/kernel_tcp.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <linux/tcp.h>  // its tcp_info: glibc's lacks the byte counts
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace tcp2rdma::tools::stats_view {
namespace {

std::string key(uint8_t family, const void* local, uint16_t local_port, const void* remote, uint16_t remote_port) {
  return stats::format_address(family, static_cast<const uint8_t*>(local), local_port) + "|" +
         stats::format_address(family, static_cast<const uint8_t*>(remote), remote_port);
}

// The peer's FIN arrived: the kernel counts it among the bytes received (one sequence number). The
// kernel's state numbers (net/tcp_states.h; glibc's enum of them cannot share a file with the
// kernel's tcp_info).
bool peer_fin_in(uint8_t state) {
  constexpr uint8_t kTimeWait = 6, kCloseWait = 8, kLastAck = 9, kClosing = 11;
  return state == kCloseWait || state == kLastAck || state == kTimeWait || state == kClosing;
}

// The application's bytes of one answer's tcp_info (kernels since 4.19 have every count used): sent
// once each (bytes_sent counts retransmissions again), and received less the peer's FIN.
bool counts_of(const nlmsghdr* h, KernelTcpBytes* out) {
  const auto* msg = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
  int len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof *msg));
  for (auto* a = reinterpret_cast<const rtattr*>(msg + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    if (a->rta_type != INET_DIAG_INFO) continue;
    if (RTA_PAYLOAD(a) < offsetof(tcp_info, tcpi_bytes_retrans) + sizeof(uint64_t)) return false;
    tcp_info info{};
    std::memcpy(&info, RTA_DATA(a), std::min<size_t>(RTA_PAYLOAD(a), sizeof info));
    out->in = info.tcpi_bytes_received - (peer_fin_in(msg->idiag_state) && info.tcpi_bytes_received > 0 ? 1 : 0);
    out->out = info.tcpi_bytes_sent - std::min(info.tcpi_bytes_retrans, info.tcpi_bytes_sent);
    return true;
  }
  return false;
}

// One family's dump into `into`; false if the kernel would not answer.
bool dump(int fd, uint8_t family, std::unordered_map<std::string, KernelTcpBytes>* into) {
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } ask{};
  ask.header.nlmsg_len = sizeof ask;
  ask.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  ask.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  ask.request.sdiag_family = family;
  ask.request.sdiag_protocol = IPPROTO_TCP;
  ask.request.idiag_states = ~0u;
  ask.request.idiag_ext = 1 << (INET_DIAG_INFO - 1);
  if (::send(fd, &ask, sizeof ask, 0) != static_cast<ssize_t>(sizeof ask)) return false;
  alignas(nlmsghdr) char buffer[32768];
  for (;;) {
    ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return false;
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<const nlmsghdr*>(buffer); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) return true;
      if (h->nlmsg_type == NLMSG_ERROR) return false;
      KernelTcpBytes counts;
      if (!counts_of(h, &counts)) continue;
      const auto* msg = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      (*into)[key(msg->idiag_family, msg->id.idiag_src, ntohs(msg->id.idiag_sport), msg->id.idiag_dst,
                  ntohs(msg->id.idiag_dport))] = counts;
    }
  }
}

}  // namespace

std::unordered_map<std::string, KernelTcpBytes> kernel_tcp_bytes() {
  std::unordered_map<std::string, KernelTcpBytes> found;
  int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return found;
  dump(fd, AF_INET, &found);
  dump(fd, AF_INET6, &found);
  ::close(fd);
  return found;
}

void use_kernel_tcp_bytes(std::vector<stats::ProcessView>* views) {
  std::unordered_map<std::string, KernelTcpBytes> kernel;
  bool asked = false;
  for (stats::ProcessView& p : *views) {
    for (stats::ConnectionView& c : p.connections) {
      if (c.path != stats::SlotPath::kTcp && c.path != stats::SlotPath::kBackOnTcp) continue;
      if (!asked) {
        kernel = kernel_tcp_bytes();
        asked = true;
      }
      auto it = kernel.find(c.local + "|" + c.remote);
      if (it == kernel.end()) continue;  // closed meanwhile, or in another network namespace
      c.tcp_bytes_in = it->second.in;
      c.tcp_bytes_out = it->second.out;
    }
  }
}

}  // namespace tcp2rdma::tools::stats_view
