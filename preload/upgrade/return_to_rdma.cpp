#include "upgrade/return_to_rdma.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "libc/real_calls.h"
#include "listener/prefork_listeners.h"
#include "listener/rdma_listener.h"
#include "readiness/epoll_sets.h"
#include "stats/stats_writer.h"
#include "rdma_stream.h"
#include "registry/connection_path.h"
#include "registry/connection_stats.h"
#include "registry/lent_streams.h"
#include "registry/socket_holders.h"
#include "registry/upgrade_session.h"
#include "upgrade/background.h"
#include "util/log.h"
#include "tuple_address.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

using Clock = std::chrono::steady_clock;
// The plan's wait from which a child stops asking its parent whether it let go (return_plan.h: 1, 2,
// 4 s; the fourth would be after 8).
constexpr uint32_t kAskParentUntilMs = 8000;

// A socket's own address in a tuple's terms (transport/tuple_address.h: IPv4-mapped as IPv4) and its
// port (host order); false when it has none.
struct LocalAddress {
  uint8_t family = 0;
  uint8_t addr[16] = {};
  uint16_t port = 0;
  bool wildcard() const { return std::all_of(addr, addr + 16, [](uint8_t b) { return b == 0; }); }
};
bool local_address(int fd, LocalAddress* out) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (real().getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  out->family = transport::tuple_address(reinterpret_cast<const sockaddr*>(&a), out->addr);
  out->port = ntohs(a.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in*>(&a)->sin_port
                                           : reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  return out->family != 0;
}

// The listener of this process that accepts connections like the server connection fd (its port, its
// address or a wildcard: an IPv6 one takes IPv4 connections too), held; empty when the process has
// none with an RDMA listener beside it (it closed it, or never had one: PostgreSQL's backends close the
// postmaster's). No request could come.
SocketHold listener_for(int fd) {
  LocalAddress local;
  if (!local_address(fd, &local)) return {};
  SocketHold found;
  for_each_tracked_fd([&](int candidate, SocketHold& socket) {
    if (found || socket->role() != SocketRole::kListener) return;
    LocalAddress bound;
    if (!local_address(candidate, &bound) || bound.port != local.port) return;
    bool same = bound.family == local.family && std::memcmp(bound.addr, local.addr, sizeof bound.addr) == 0;
    if (!bound.wildcard() && !same) return;
    if (!surely_without_rdma(socket.get())) found = SocketHold(socket.get());
  });
  return found;
}

// A forked child that holds the connection alone (registry/fork_share.h) and has no RDMA listener
// of its own on its port: the listener it kept from the fork (TrackedSocket::return_listener), with an
// RDMA listener made now on a port of this process's, which the family's directory names to the
// process holding the listener's port (listener/prefork_listeners.h), as for the first upgrade of a
// connection a fork interrupted. Empty when none could be made (the listener has no directory: the
// process forked before its first accept had an RDMA listener).
SocketHold family_listener_for(TrackedSocket* socket, int fd) {
  SocketHold listener = socket->forks.return_listener();
  if (!listener) return {};
  claim_rdma_listener(fd, listener.get());  // once per process; the family's port when nobody holds it
  if (surely_without_rdma(listener.get())) return {};
  return listener;
}

// Whether the kernel's TCP connection is still open both ways: one whose either side ended (a
// shutdown, the peer's FIN) stays TCP to its end.
bool tcp_established(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  return real().getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_ESTABLISHED;
}

// Never again for this connection: the epoll registrations kept for a return are forgotten (an
// epoll_wait on their set takes the module's path while it holds any).
void never(TrackedSocket* socket, int fd) {
  socket->returns.done();
  epoll_move_pending(fd, /*upgraded=*/false);
}

// The same, and the log says why.
void give_up(TrackedSocket* socket, int fd, const char* why) {
  never(socket, fd);
  log_line("%s: stays on tcp for good (%s)", connection_label(socket), why);
}

// A connection shared with other processes: true when none holds it any more (it is this process's
// alone from now on, and the log says so). Otherwise the attempt waits for the next, doubling, and
// after the one 64 s on the connection stays on TCP for good (about two minutes of looking).
bool held_here_alone(TrackedSocket* socket, int fd, Clock::time_point now) {
  Holders holders = socket_holders(fd, socket->forks.creator());
  if (holders == Holders::kThisProcessOnly) {
    socket->forks.note_alone();
    log_line("%s: no other process holds the connection any more: it may go back to rdma here",
             connection_label(socket));
    return true;
  }
  if (socket->returns.wait_ms() >= ReturnPlan::kLongestWait.count()) {
    give_up(socket, fd, holders == Holders::kOthers ? "another process holds the connection"
                                                   : "a process that may hold the connection cannot be looked at");
  } else {
    socket->returns.failed(now);
  }
  return false;
}

// A client whose rule upgrades before connect() returns waits for its prompt return as its connect()
// waited for the first upgrade: the server's side asks to return at once (its marker said so), so the
// connection is on RDMA again before the application goes on, and a fork that follows (rsync's client
// forks its receiver right after the daemon's child changed credentials) finds it there. The wait ends
// after kPromptWaitMost (or the rule's upgrade timeout, if shorter) at the latest, and the attempt then
// goes on beside the application: a server whose side said it returns at once and then never uses the
// connection again holds our request unanswered for its listener's hold time (5 s with the default
// rules), which an application should not wait out; a return takes a few round trips and a setup (23
// to 277 ms in the Soft-RoCE VMs under emulation).
constexpr auto kPromptWaitMost = std::chrono::seconds(2);
void wait_if_before_return(TrackedSocket* socket, const config::Decision& decision) {
  if (decision.options->upgrade == config::UpgradeMode::kBackground) return;
  UpgradeSession* session = socket->session();
  if (session == nullptr) return;
  auto most = std::min<std::chrono::microseconds>(kPromptWaitMost,
                                                  std::chrono::microseconds(decision.options->upgrade_timeout_us));
  if (!session->wait_over_for(most)) {
    log_line("%s: the return is not over after %lld ms; it goes on beside the application", session->label(),
             static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(most).count()));
  }
}

}  // namespace

void try_return(TrackedSocket* socket, int fd, LearnAlone learn_alone) noexcept {
  auto now = Clock::now();
  config::Decision decision{};
  bool prompt = false;
  if (!socket->returns.take_due(now, &decision, &prompt)) return;
  SavedErrno keep_errno;
  // A forked child that claimed it while its parent still held it: the parent may have let go since.
  // Asked at the attempts 1, 3, 7 and 15 s after the claim; then never again.
  if (socket->shared() && socket->forks.awaits_parents_word() && !learn_alone(socket)) {
    if (socket->returns.wait_ms() < kAskParentUntilMs) {
      socket->returns.failed(now);
      return;
    }
  }
  // Another process may hold it (a fork, a spawn since it was made, or a child it was lent to): a
  // switch here would split its bytes between the two. The kernel says whether one still does.
  if (socket->forks.passed()) {
    give_up(socket, fd, "it was passed to another process");
    return;
  }
  if (socket->shared() || (socket->serial() != 0 && is_lent(socket->serial()))) {
    if (!held_here_alone(socket, fd, now)) return;
  }
  // Another thread of the application is inside a kernel call on it (a blocked read, a poll): it
  // would take the switch's bytes for the peer's, or sleep on a socket that no longer carries the
  // connection. Looked at again later (start_return_session looks once more, after its session is
  // in place, for a call that began meanwhile).
  if (socket->tcp_calls() != 0) {
    socket->returns.failed(now);
    return;
  }
  // The peer's bytes from the old stream are read first: the new one's prefix holds only the TCP tail.
  if (socket->prefix.present()) {
    socket->returns.failed(now, /*double_wait=*/false);
    return;
  }
  if (!tcp_established(fd)) {
    never(socket, fd);  // its end is TCP's: nothing to say
    return;
  }
  SocketHold listener;
  config::Role role = config::Role::kClient;
  if (socket->role() == SocketRole::kServer) {
    role = config::Role::kServer;
    listener = listener_for(fd);
    if (!listener && socket->forks.return_listener()) {
      listener = family_listener_for(socket, fd);
      if (!listener) {
        socket->returns.failed(now);  // no RDMA listener could be had here yet
        return;
      }
    }
    if (!listener) {
      give_up(socket, fd, "this process has no listener on its port to hear the client's request");
      return;
    }
  } else if (socket->role() != SocketRole::kClient) {
    never(socket, fd);
    return;
  }
  // A connection a forked child holds alone: `tcp2rdma stat` of this process lists it from here on.
  if (!stats::names_own_slot(socket->stats_slot.load(std::memory_order_relaxed))) {
    stats_taken_over(socket, fd, role, decision);
  }
  if (!upgrade_beside(fd, role, listener.get(), decision, SessionStart::kReturn)) {
    socket->returns.failed(now, /*double_wait=*/false);
    return;
  }
  if (prompt && role == config::Role::kClient) wait_if_before_return(socket, decision);
}

void conclude_return(TrackedSocket* socket, const UpgradeOutcome& outcome, const transport::RdmaStream* stream,
                     char* words, size_t size) noexcept {
  const char* colon = outcome.detail.empty() ? "" : ": ";
  if (outcome.upgraded && stream != nullptr) {
    socket->returns.done();
    std::snprintf(words, size,
                  "back on rdma (receive ring %llu KiB, the peer's %llu KiB; its upgrade %u; setup %ld ms, switch "
                  "%ld ms)",
                  static_cast<unsigned long long>(stream->ring_size() >> 10),
                  static_cast<unsigned long long>(stream->peer_ring_size() >> 10), socket->upgrades(),
                  outcome.setup_ms, outcome.switch_ms);
    return;
  }
  if (!outcome.connection_usable) {
    socket->returns.done();
    std::snprintf(words, size, "reset: the switch back to rdma broke (%s%s%s)", outcome.why, colon,
                  outcome.detail.c_str());
    return;
  }
  socket->returns.failed(Clock::now());
  std::snprintf(words, size, "still on tcp (%s%s%s); rdma is tried again in %u s", outcome.why, colon,
                outcome.detail.c_str(), socket->returns.wait_ms() / 1000);
}

}  // namespace tcp2rdma::preload
