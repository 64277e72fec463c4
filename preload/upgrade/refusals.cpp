// Servers that lately refused this process RDMA (refusals.h).
#include "upgrade/refusals.h"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "libc/real_calls.h"
#include "registry/per_process.h"

namespace tcp2rdma::preload {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kFirstPause = std::chrono::seconds(1);
constexpr auto kLongestPause = std::chrono::seconds(64);
constexpr size_t kMostServers = 256;  // a process refused by more forgets the one refused longest ago

struct Refusal {
  sockaddr_storage server;
  Clock::duration pause;    // since the last refusal
  Clock::time_point until;  // taken at its word until then
};

struct Refusals {
  explicit Refusals(unsigned made_in) : generation(made_in) {}
  const unsigned generation;
  std::mutex mu;
  std::vector<Refusal> servers;
};

std::atomic<Refusals*> g_refusals{nullptr};

// Address and port only (sockaddr_in6 has a flow label and scope beside them).
bool same_server(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
  const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
  return x.sin6_port == y.sin6_port && std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
}

Refusal* find(Refusals& r, const sockaddr_storage& server) {
  for (Refusal& known : r.servers) {
    if (same_server(known.server, server)) return &known;
  }
  return nullptr;
}

}  // namespace

std::chrono::milliseconds refused_for(const sockaddr_storage& server) noexcept {
  Refusals* r = this_process_instance(g_refusals);
  if (r == nullptr) return {};
  std::lock_guard lock(r->mu);
  const Refusal* known = find(*r, server);
  auto now = Clock::now();
  if (known == nullptr || known->until <= now) return {};
  return std::chrono::ceil<std::chrono::milliseconds>(known->until - now);
}

void note_refusal(const sockaddr_storage& server) noexcept {
  Refusals* r = this_process_instance(g_refusals);
  if (r == nullptr) return;
  std::lock_guard lock(r->mu);
  auto now = Clock::now();
  if (Refusal* known = find(*r, server)) {
    known->pause = std::min<Clock::duration>(known->pause * 2, kLongestPause);
    known->until = now + known->pause;
    return;
  }
  if (r->servers.size() >= kMostServers) {
    r->servers.erase(std::min_element(r->servers.begin(), r->servers.end(),
                                      [](const Refusal& a, const Refusal& b) { return a.until < b.until; }));
  }
  try {
    r->servers.push_back({server, kFirstPause, now + kFirstPause});
  } catch (const std::bad_alloc&) {
    // Not remembered: the next connection tries again.
  }
}

void note_acceptance(const sockaddr_storage& server) noexcept {
  Refusals* r = this_process_instance(g_refusals);
  if (r == nullptr) return;
  std::lock_guard lock(r->mu);
  std::erase_if(r->servers, [&](const Refusal& known) { return same_server(known.server, server); });
}

namespace {

// The server's end of the connection has closed (its FIN or a reset came).
bool server_end_closed(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (real().getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  switch (info.tcpi_state) {
    case TCP_CLOSE_WAIT: case TCP_LAST_ACK: case TCP_CLOSING: case TCP_TIME_WAIT: case TCP_CLOSE: return true;
    default: return false;
  }
}

}  // namespace

bool refusal_to_remember(int fd, bool settled, transport::Status s, transport::DeclineReason declined) noexcept {
  using transport::DeclineReason;
  bool said_of_server = s == transport::Status::kTimeout ||
                        (s == transport::Status::kRejected && declined != DeclineReason::kBusy &&
                         declined != DeclineReason::kExpired && declined != DeclineReason::kTooLate &&
                         declined != DeclineReason::kDuplicate);
  // The state is read last: one system call, and only for an answer that would otherwise count.
  return said_of_server && !settled && !server_end_closed(fd);
}

}  // namespace tcp2rdma::preload
