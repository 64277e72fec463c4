// The module's state for one kernel TCP socket that a rule could move onto RDMA. dup'd descriptors
// share one TrackedSocket, as they share one kernel socket; it lives until the last of them is closed.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "registry/deferred_upgrade_record.h"
#include "registry/fd_table.h"
#include "registry/fork_share.h"
#include "registry/return_plan.h"
#include "registry/tcp_prefix.h"
#include "rule_set.h"

namespace tcp2rdma::transport {
class RdmaStream;
enum class Status;
}  // namespace tcp2rdma::transport

namespace tcp2rdma::preload {

class UpgradeSession;

// The state only a listening socket has. The socket owns it and ends it with its last descriptor;
// only the listener code (listener/listener_state.h) knows what it holds, so the registry does not
// depend on it.
class ListenerParts {
 public:
  ListenerParts() = default;
  virtual ~ListenerParts() = default;
  ListenerParts(const ListenerParts&) = delete;
  ListenerParts& operator=(const ListenerParts&) = delete;
};

// The resource generation: counts the forks on the way to this process and the changes of
// credentials in it (0 in the process the module was loaded into; the fork wrapper bumps it in each
// child, the credential wrappers after each change). Streams, listeners and the module's threads of an
// older generation are never used to make or carry anything new. Cheaper than getpid() on every call.
unsigned fork_generation() noexcept;
void note_forked_child() noexcept;
// After a change of this process's credentials (interpose/credentials.cpp): a new generation, and a
// new epoch for the transport's device contexts and links (transport/credential_epoch.h).
void note_credentials_changed() noexcept;
// The fork wrapper closes the gate before it settles the sessions and opens it after the real fork
// (in the child: a gate of its own): no upgrade session starts in between (start_session waits).
void close_fork_gate() noexcept;
void open_fork_gate(bool child) noexcept;

enum class SocketRole : uint8_t {
  kUnknown,   // created, neither connected nor listening yet
  kListener,  // listen() succeeded
  kClient,    // this program called connect()
  kServer,    // returned by accept() on a listener
};

// Where a connection's bytes go: the one named state of its path (docs/architecture.md, "The map of
// preload/"). The socket keeps kTcp, kUpgradePending, kRdma, kMovingBack and kBackOnTcp itself; while
// an upgrade session is under way on a socket that is otherwise kTcp, its phase is the authority, and
// path() reports kUpgradingOnTcp or kSwitching from it.
//
//   kTcp -> kUpgradePending -> kTcp          a non-blocking connect decided for RDMA, then taken up
//   kTcp -> kRdma                             the stream is in place (set_stream)
//   kTcp -> kBackOnTcp                        a child takes up a connection its parent's deferred upgrade
//                                             brought to RDMA and moved back (process/deferred_upgrade.h)
//   kRdma -> kMovingBack -> kBackOnTcp        this process moves it back (fork, exec, spawn)
//   kMovingBack -> kRdma                      that move failed: it stays on RDMA
//   kRdma -> kBackOnTcp                       the peer moved it back
//   kRdma -> kFailingOver -> kBackOnTcp       the RDMA path failed: it goes on over TCP (failover.h)
//   kFailingOver -> kRdma                     it could not: the stream is reset after all
//   kBackOnTcp -> kRdma                       back to RDMA: a new stream (upgrade/return_to_rdma.h)
enum class Path : uint8_t {
  kTcp,             // the kernel socket alone: never selected, stayed TCP, or not upgraded yet
  kUpgradePending,  // a non-blocking connect decided for RDMA, waiting for the connection to be up
  kUpgradingOnTcp,  // (from the session) the upgrade is under way; calls go to TCP, counted
  kSwitching,       // (from the session) the byte-exact switch is under way; calls wait for it
  kRdma,            // on the stream
  kMovingBack,      // a thread of this process is moving it back to TCP; calls that meet the move wait
  kBackOnTcp,       // on TCP again, after the prefix of the peer's bytes that were on the stream
  kFailingOver,     // the RDMA path failed; the path watcher moves the connection onto TCP; calls wait
};
const char* to_string(Path path) noexcept;

class TrackedSocket {
 public:
  TrackedSocket(int domain, SocketRole role);  // out of line: the stream types are incomplete here
  TrackedSocket(const TrackedSocket&) = delete;
  TrackedSocket& operator=(const TrackedSocket&) = delete;

  int domain() const noexcept { return domain_; }
  SocketRole role() const noexcept { return role_.load(std::memory_order_acquire); }
  void set_role(SocketRole role) noexcept { role_.store(role, std::memory_order_release); }

  // One reference per descriptor that maps to this socket.
  void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  // Drops one reference; the last one closes an upgraded stream in order (its bytes first) and the socket.
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  // Descriptors and holds (a count that may change at once: for a holder asking whether it is the last).
  int references() const noexcept { return refs_.load(std::memory_order_acquire); }
  // One more reference unless the last one is gone already (the socket is being destroyed).
  bool try_add_ref() noexcept {
    for (int n = refs_.load(std::memory_order_relaxed); n > 0;) {
      if (refs_.compare_exchange_weak(n, n + 1, std::memory_order_acquire, std::memory_order_relaxed)) return true;
    }
    return false;
  }

  // The RDMA stream this connection moved onto, or null while it is on TCP. Set once, before the
  // descriptor is handed to the application (upgrade.cpp), so readers need no lock.
  // Null in a forked child: the stream's verbs resources belong to the process that made it
  // (fork_generation()), and a child must never touch them. Null too once the connection is back on
  // TCP (move_back.h).
  transport::RdmaStream* stream() const noexcept {
    return back_on_tcp() ? nullptr : own_stream();
  }
  // The connection's path now (Path above): one load, and the session's phase when kTcp.
  Path path() const noexcept;
  // The one way the socket's own part of the path changes: from `from` to `to` if it is `from` now
  // (true), else nothing (false: another thread moved it first). Transitions outside the table above
  // are refused.
  bool move_path(Path from, Path to) noexcept;
  bool path_is(Path p) const noexcept { return path_.load(std::memory_order_acquire) == p; }
  // The stream this process made, moved back or not (for its end).
  transport::RdmaStream* own_stream() const noexcept {
    transport::RdmaStream* s = stream_.load(std::memory_order_acquire);  // generation_ is set before it
    return s != nullptr && generation_.load(std::memory_order_relaxed) == fork_generation() ? s : nullptr;
  }
  // Whether this socket moved to RDMA in an ancestor process and is still there: a connection the
  // parent lent this forked child (process/fork_service.h), not claimed yet.
  bool stream_of_parent() const noexcept {
    return stream_.load(std::memory_order_acquire) != nullptr &&
           generation_.load(std::memory_order_relaxed) != fork_generation() && !back_on_tcp();
  }
  // The stream is in place: kTcp (or, a return, kBackOnTcp) -> kRdma; an earlier stream of ours ends.
  void set_stream(std::unique_ptr<transport::RdmaStream> stream) noexcept;
  // How many times the connection went onto RDMA (both ends count the same switches): its next
  // upgrade's request names it (TcpTuple::reserved), unlike a repeat of its first.
  uint8_t upgrades() const noexcept { return upgrades_.load(std::memory_order_acquire); }
  // The count the program that exec'd this one handed on with the connection (process/exec_returns.h).
  void adopt_upgrades(uint8_t n) noexcept { upgrades_.store(n, std::memory_order_release); }
  // Whether another process may hold this connection too (registry/fork_share.h): then it never
  // returns to RDMA.
  bool shared() const noexcept { return forks.shared(); }
  ForkShare forks;
  // When the connection, back on TCP, tries RDMA again (return_plan.h).
  ReturnPlan returns;
  // The application's kernel calls under way while a return is planned (route_for_call counts them:
  // StreamRef::counted_on_tcp). A thread inside the kernel's read or poll would take the switch's
  // bytes, or sleep on a socket no longer carrying the connection: a return starts only when none
  // is. Sequentially consistent on both sides (the count, then the session; the session, then the
  // count): a call either sees the return's session (session_started) or is seen by it.
  void begin_tcp_call() noexcept { tcp_calls_.fetch_add(1, std::memory_order_seq_cst); }
  void end_tcp_call() noexcept { tcp_calls_.fetch_sub(1, std::memory_order_release); }
  int tcp_calls() const noexcept { return tcp_calls_.load(std::memory_order_seq_cst); }
  bool session_started() const noexcept;

  // Back to TCP (move_back.h). The connection went onto RDMA and came back: its calls are the
  // kernel's again, after `prefix`.
  bool back_on_tcp() const noexcept { return path_is(Path::kBackOnTcp); }
  // The rule's on_fork: whether a fork (or exec) moves the connection back to TCP first.
  std::atomic<bool> follows_fork{true};
  // A thread of this process is moving the connection back: a call that found the stream moved waits
  // for the prefix before it reads on TCP.
  bool moving_back() const noexcept { return path_is(Path::kMovingBack); }
  // Moving back or failing over: a thread of this process is putting the connection onto TCP, and a
  // call that found the stream moved waits for it to finish (the prefix, the registrations).
  bool being_moved() const noexcept {
    Path p = path_.load(std::memory_order_acquire);
    return p == Path::kMovingBack || p == Path::kFailingOver;
  }
  // A shutdown(SHUT_WR) while the connection fails over is TCP's once the resend is out. The
  // application's call and the end of the failover each say so here; exactly one of them learns that
  // the other came first and shuts TCP's sending side (one atomic, so no fence is needed).
  // The application's: true when the connection is on TCP already (the caller shuts it down).
  bool shut_when_on_tcp() noexcept { return tcp_shut_.fetch_or(kShutAsked) & kOnTcp; }
  // The mover's, once on TCP: true when the application asked for the shutdown meanwhile.
  bool on_tcp_shut_asked() noexcept { return tcp_shut_.fetch_or(kOnTcp) & kShutAsked; }
  // Names this socket among every socket with a stream (hold_live), from set_stream on; never reused
  // in the process, so a watcher that keeps it finds a closed socket gone, never another one.
  uint64_t serial() const noexcept { return serial_; }
  TcpPrefix prefix;  // the peer's bytes unread at the move back, served before the kernel's

  // A server connection whose background upgrade was still on TCP when its process forked: the
  // process that uses the connection next takes the upgrade up again (process/deferred_upgrade.h).
  using DeferredUpgrade = preload::DeferredUpgrade;
  bool has_deferred_upgrade() const noexcept { return deferred_.load(std::memory_order_acquire) != nullptr; }
  const DeferredUpgrade* deferred_upgrade() const noexcept { return deferred_.load(std::memory_order_acquire); }
  // Installs the record (the socket owns it from here) and names the socket by a serial, found by
  // SocketHold::live, as a socket with a stream is: a child's claim of it asks by that serial.
  void defer_upgrade(std::unique_ptr<DeferredUpgrade> record) noexcept;
  // Takes the record: exactly one thread (or the parent's answering thread) gets it.
  std::unique_ptr<DeferredUpgrade> take_deferred_upgrade() noexcept {
    return std::unique_ptr<DeferredUpgrade>(deferred_.exchange(nullptr, std::memory_order_acq_rel));
  }
  // A new session that takes up the ended one (UpgradeSession::continue_from), or null when none
  // could be made or another thread made one first.
  UpgradeSession* restart_session();
  // A new session for the connection's return to RDMA (upgrade/return_to_rdma.h), after the ended
  // one; null when it is shared with another process (shared()), or another thread made one first.
  UpgradeSession* start_return_session();

  // The connection's upgrade session (upgrade_session.h), from the moment it starts; owned by the socket.
  // Null for a connection no rule moves. start_session() makes it, or returns null when it exists.
  UpgradeSession* session() const noexcept { return session_.load(std::memory_order_acquire); }
  UpgradeSession* start_session();
  // The session while it is under way (its phase is not over), else null: one load on the fast path.
  UpgradeSession* active_session() const noexcept;

  // O_NONBLOCK of the socket's file description, so that an upgraded read or write needs no fcntl:
  // read once at the upgrade, then followed through fcntl(F_SETFL) and ioctl(FIONBIO) (interpose/fd.cpp).
  std::atomic<bool> nonblocking{false};

  // A client whose non-blocking connect was decided for RDMA while it was still under way: the upgrade
  // runs once the connection is up, at the application's next call on it (finish_pending_upgrade).
  bool upgrade_pending() const noexcept { return path_is(Path::kUpgradePending); }
  // connect() returned EINPROGRESS and no later connect() has reported the completion yet.
  std::atomic<bool> connect_in_progress{false};
  config::Decision pending_decision{};
  // Set when that upgrade failed such that the connection must not be used (required, or broken
  // half-way): getsockopt(SO_ERROR) reports it once, as the kernel reports a failed connect.
  std::atomic<int> pending_error{0};
  // The connection's slot in the process's stats segment (stats/stats_writer.h), from its decision
  // (decide_connection) until the socket goes; a forked child's inherited ones name nothing.
  std::atomic<int32_t> stats_slot{-1};

  // As the application last set them (the setsockopt wrapper): SO_LINGER (-1 off, else seconds; read
  // at the last close, end_stream()), TCP_CORK (writes then say more follows: push_held_later; while
  // on RDMA the kernel socket is not told, cork_unsynced, until mark_connection_back_on_tcp).
  std::atomic<int> linger_seconds{-1};
  std::atomic<bool> corked{false}, cork_unsynced{false};
  std::atomic<uint32_t> held_listed_by{0};  // the path watcher whose held list has it (0: none)
  std::atomic<bool> failure_logged{false};  // the log said why its stream failed (stream_calls.cpp)

  // What only a listener has (listener/listener_state.h), or null: made at its first listen() that a
  // rule may select RDMA for, ended with the socket.
  ListenerParts* listener_parts() const noexcept { return listener_parts_.load(std::memory_order_acquire); }
  // Installs `parts` unless the socket has some already; returns the ones it has then.
  ListenerParts* adopt_listener_parts(std::unique_ptr<ListenerParts> parts) noexcept;

 private:
  ~TrackedSocket();
  // The session after the ended one, which it keeps (restart_session, start_return_session).
  UpgradeSession* follow_session();
  // The last descriptor is gone while a forked child still holds the connection (lent_streams.h).
  void hand_over_to_children(transport::RdmaStream* s) noexcept;

  const int domain_;
  std::atomic<SocketRole> role_;
  std::atomic<int> refs_{1};
  std::atomic<transport::RdmaStream*> stream_{nullptr};
  std::atomic<UpgradeSession*> session_{nullptr};
  std::atomic<DeferredUpgrade*> deferred_{nullptr};
  std::atomic<Path> path_{Path::kTcp};
  std::atomic<unsigned> generation_{0};  // written before stream_ (release), read after it (acquire)
  std::atomic<uint8_t> upgrades_{0};
  std::atomic<int> tcp_calls_{0};
  uint64_t serial_ = 0;
  static constexpr uint8_t kShutAsked = 1, kOnTcp = 2;
  std::atomic<uint8_t> tcp_shut_{0};
  std::atomic<ListenerParts*> listener_parts_{nullptr};
  friend class SocketHold;
};

// A reference to a socket held for the length of a call: another thread's close() then only takes the
// descriptor away, as the kernel keeps a socket alive for a call in progress (a read blocked in one
// thread goes on after another thread's close()). Every call that follows the socket's pointer holds
// it; a bare fd_table().find() is for comparing.
class SocketHold {
 public:
  SocketHold() noexcept = default;
  // The socket fd names now, held; empty when fd is not one of ours (FdTable::hold).
  static SocketHold of(int fd) noexcept;
  // Another reference to a socket the caller holds already.
  explicit SocketHold(TrackedSocket* socket) noexcept : socket_(socket) {
    if (socket_ != nullptr) socket_->add_ref();
  }
  // The socket with a stream that `serial` names (TrackedSocket::serial), held; empty once it is gone.
  static SocketHold live(uint64_t serial) noexcept;
  SocketHold(SocketHold&& other) noexcept : socket_(other.socket_) { other.socket_ = nullptr; }
  SocketHold& operator=(SocketHold&& other) noexcept {
    if (this != &other) {
      if (socket_ != nullptr) socket_->release();
      socket_ = other.socket_;
      other.socket_ = nullptr;
    }
    return *this;
  }
  ~SocketHold() {
    if (socket_ != nullptr) socket_->release();
  }
  SocketHold(const SocketHold&) = delete;
  SocketHold& operator=(const SocketHold&) = delete;

  TrackedSocket* get() const noexcept { return socket_; }
  TrackedSocket* operator->() const noexcept { return socket_; }
  explicit operator bool() const noexcept { return socket_ != nullptr; }

 private:
  struct Adopt {};
  SocketHold(TrackedSocket* socket, Adopt) noexcept : socket_(socket) {}

  TrackedSocket* socket_ = nullptr;
};

// Calls f(fd, socket) for every descriptor in [first, last] that names one of our sockets, in order,
// the socket held while f runs: the walk that fork, exec, spawn and close_range make over the table.
template <typename F>
void for_each_tracked_fd(F&& f, int first = 0, int last = INT_MAX) {
  int end = std::min(fd_table().high_water(), last == INT_MAX ? INT_MAX : last + 1);
  for (int fd = std::max(first, 0); fd < end; ++fd) {
    if (SocketHold socket = SocketHold::of(fd)) f(fd, socket);
  }
}

// Makes fd name a fresh unconnected socket (same number, same close-on-exec flag) and forgets it: a
// stream that cannot be used here then fails loudly (ENOTCONN, EPIPE) instead of leaving the idle
// TCP socket underneath to be read or written as if it were the connection.
void replace_with_unconnected_socket(int fd, int domain) noexcept;
// The same for every descriptor of `socket` (the caller holds it: the last one may otherwise free it).
void replace_all_with_unconnected_sockets(TrackedSocket* socket) noexcept;

// Resets fd's TCP connection (connect to AF_UNSPEC disconnects with a reset): the peer reads
// ECONNRESET, never a clean end, and this side reads errors from then on.
void reset_connection(int fd) noexcept;

// The end of a stream whose last descriptor goes, as kernel TCP ends a socket: a close that discards
// bytes the application never read, or one with SO_LINGER {on, 0 s}, resets the connection (the peer
// reads ECONNRESET); otherwise every byte written is delivered, then the peer reads EOF, within the
// stream's timeout (else a reset). A stream that moved back to TCP only goes away. The last close()
// runs this off the application's thread (stream_closer.h).
void end_stream(transport::RdmaStream* s, int linger_seconds) noexcept;
// Whether that end is a reset (SO_LINGER {on, 0 s}, or bytes the application never read).
bool ends_with_reset(transport::RdmaStream* s, int linger_seconds) noexcept;
// The log says when the peer reads a reset: ends_with_reset's (logged_reset_at_close), or a close
// that returned `closed`, not acknowledged in time or broken by then (log_unclean_end; stream_end.cpp).
bool logged_reset_at_close(const TrackedSocket* socket, transport::RdmaStream* s, int linger_seconds) noexcept;
void log_unclean_end(const transport::RdmaStream* s, transport::Status closed) noexcept;

// At exit: closes in order every stream this process made that is still open, as the kernel delivers
// a socket's unsent bytes after its process exited.
void close_streams_at_exit() noexcept;

}  // namespace tcp2rdma::preload
