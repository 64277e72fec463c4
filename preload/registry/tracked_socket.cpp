#include "registry/tracked_socket.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "keep_forever.h"
#include "libc/real_calls.h"
#include "news_list.h"
#include "credential_epoch.h"
#include "device_context.h"
#include "own_descriptors.h"
#include "rdma_stream.h"
#include "registry/fd_table.h"
#include "registry/lent_streams.h"
#include "registry/socket_registry.h"
#include "registry/stream_closer.h"
#include "registry/upgrade_session.h"
#include "stats/stats_writer.h"

namespace tcp2rdma::preload {

TrackedSocket::TrackedSocket(int domain, SocketRole role) : domain_(domain), role_(role) {}

SocketHold SocketHold::of(int fd) noexcept { return SocketHold(fd_table().hold(fd), Adopt{}); }

namespace {
std::atomic<unsigned> g_fork_generation{0};

// Every socket with a stream, descriptor or not: one whose last descriptor was closed while a call
// still held it (StreamRef) is still to be ended at exit. Never destroyed: exit hooks use it.
std::mutex*& live_mutex_slot() {
  static auto* mutex = new std::mutex;
  return mutex;
}
std::mutex& live_mutex() { return *live_mutex_slot(); }
std::vector<TrackedSocket*>& live_sockets() {
  static auto* sockets = new std::vector<TrackedSocket*>;
  return *sockets;
}
// The same sockets by serial (SocketHold::live), under live_mutex.
std::unordered_map<uint64_t, TrackedSocket*>& live_by_serial() {
  static auto* sockets = new std::unordered_map<uint64_t, TrackedSocket*>;
  return *sockets;
}
std::atomic<uint64_t> g_next_serial{1};
}  // namespace

SocketHold SocketHold::live(uint64_t serial) noexcept {
  std::lock_guard lock(live_mutex());
  auto it = live_by_serial().find(serial);
  // A socket whose last reference went is being destroyed: its destructor waits for this lock to
  // take it off the map, and must not find it held again.
  if (it == live_by_serial().end() || !it->second->try_add_ref()) return {};
  return SocketHold(it->second, Adopt{});
}

unsigned fork_generation() noexcept { return g_fork_generation.load(std::memory_order_relaxed); }
void note_credentials_changed() noexcept {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  transport::note_credentials_changed();
}
void note_forked_child() noexcept {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  stats::forget_parent_segment();  // the child's connections go into a segment of its own
  fd_table().forget_holders_after_fork();
  // Another thread of the parent may have held the lock at the fork; the child has only this one.
  transport::keep_forever(std::exchange(live_mutex_slot(), new std::mutex));
  transport::own_descriptors_after_fork();
  transport::device_contexts_after_fork();
  transport::news_lists_after_fork();
  forget_closing_after_fork();
}

namespace {
// Sessions start under this gate's shared side; a fork holds its exclusive side from before it settles
// every session until the real fork is done, so that no session starts in between (the child would
// get a session under way whose switch thread it does not have).
std::shared_mutex*& fork_gate_slot() {
  static auto* gate = new std::shared_mutex;
  return gate;
}
}  // namespace

void close_fork_gate() noexcept { fork_gate_slot()->lock(); }
void open_fork_gate(bool child) noexcept {
  if (child) {
    // The lock of the parent's thread is not the child's.
    transport::keep_forever(std::exchange(fork_gate_slot(), new std::shared_mutex));
  } else {
    fork_gate_slot()->unlock();
  }
}

UpgradeSession* TrackedSocket::start_session() {
  std::shared_lock gate(*fork_gate_slot());
  auto* fresh = new UpgradeSession;
  UpgradeSession* none = nullptr;
  if (!session_.compare_exchange_strong(none, fresh, std::memory_order_acq_rel)) {
    delete fresh;  // the connection has one already: it is never upgraded twice
    return nullptr;
  }
  return fresh;
}

UpgradeSession* TrackedSocket::restart_session() {
  std::shared_lock gate(*fork_gate_slot());
  return follow_session();
}

UpgradeSession* TrackedSocket::start_return_session() {
  // Under the gate: a fork after this look settles the session; one before it made the socket shared.
  std::shared_lock gate(*fork_gate_slot());
  if (shared()) return nullptr;
  UpgradeSession* fresh = follow_session();
  if (fresh == nullptr) return nullptr;
  fresh->set_returning();
  // A kernel call that began before the session was there (begin_tcp_call) is still under way: the
  // return ends here, before anything went on the wire.
  if (tcp_calls() != 0 && fresh->end_on_tcp()) return nullptr;
  return fresh;
}

UpgradeSession* TrackedSocket::follow_session() {
  UpgradeSession* old = session();
  if (old == nullptr || old->phase() != UpgradeSession::Phase::kOver) return nullptr;
  auto* fresh = new (std::nothrow) UpgradeSession;
  if (fresh == nullptr) return nullptr;
  // Sequentially consistent: a return's look at the kernel calls under way comes after it (tcp_calls).
  if (!session_.compare_exchange_strong(old, fresh, std::memory_order_seq_cst)) {
    delete fresh;
    return nullptr;
  }
  fresh->continue_from(old);
  return fresh;
}

bool TrackedSocket::session_started() const noexcept {
  UpgradeSession* s = session_.load(std::memory_order_seq_cst);
  return s != nullptr && s->phase() != UpgradeSession::Phase::kOver;
}

void TrackedSocket::defer_upgrade(std::unique_ptr<DeferredUpgrade> record) noexcept {
  if (serial_ == 0) {
    serial_ = g_next_serial.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(live_mutex());
    live_by_serial().emplace(serial_, this);
  }
  delete deferred_.exchange(record.release(), std::memory_order_acq_rel);
}

ListenerParts* TrackedSocket::adopt_listener_parts(std::unique_ptr<ListenerParts> parts) noexcept {
  ListenerParts* none = nullptr;
  if (listener_parts_.compare_exchange_strong(none, parts.get(), std::memory_order_acq_rel)) return parts.release();
  return none;  // another thread's, installed first; ours goes
}

UpgradeSession* TrackedSocket::active_session() const noexcept {
  UpgradeSession* s = session();
  return s != nullptr && s->phase() != UpgradeSession::Phase::kOver ? s : nullptr;
}

const char* to_string(Path path) noexcept {
  switch (path) {
    case Path::kTcp: return "tcp";
    case Path::kUpgradePending: return "upgrade pending";
    case Path::kUpgradingOnTcp: return "upgrading on tcp";
    case Path::kSwitching: return "switching";
    case Path::kRdma: return "rdma";
    case Path::kMovingBack: return "moving back";
    case Path::kBackOnTcp: return "back on tcp";
    case Path::kFailingOver: return "failing over";
  }
  return "?";
}

Path TrackedSocket::path() const noexcept {
  Path p = path_.load(std::memory_order_acquire);
  if (p != Path::kTcp) return p;
  UpgradeSession* s = active_session();
  if (s == nullptr) return p;
  return s->phase() == UpgradeSession::Phase::kSwitching ? Path::kSwitching : Path::kUpgradingOnTcp;
}

bool TrackedSocket::move_path(Path from, Path to) noexcept {
  bool allowed = (from == Path::kTcp && (to == Path::kUpgradePending || to == Path::kRdma || to == Path::kBackOnTcp)) ||
                 (from == Path::kUpgradePending && to == Path::kTcp) ||
                 (from == Path::kRdma && (to == Path::kMovingBack || to == Path::kBackOnTcp ||
                                          to == Path::kFailingOver)) ||
                 (from == Path::kMovingBack && (to == Path::kRdma || to == Path::kBackOnTcp)) ||
                 (from == Path::kFailingOver && (to == Path::kRdma || to == Path::kBackOnTcp)) ||
                 (from == Path::kBackOnTcp && to == Path::kRdma);
  return allowed && path_.compare_exchange_strong(from, to, std::memory_order_acq_rel);
}

void TrackedSocket::set_stream(std::unique_ptr<transport::RdmaStream> stream) noexcept {
  // Back to RDMA: the stream this process made before has moved its bytes to TCP and only ends. One a
  // parent made is the parent's (never touched here).
  transport::RdmaStream* before = own_stream();
  generation_.store(fork_generation(), std::memory_order_relaxed);
  // A socket named at a fork that deferred its upgrade keeps that name: a child's claim asks by it.
  bool named = serial_ != 0;
  if (!named) serial_ = g_next_serial.fetch_add(1, std::memory_order_relaxed);
  stream_.store(stream.release(), std::memory_order_release);
  tcp_shut_.store(0, std::memory_order_relaxed);  // a shutdown during a failover to come is that one's
  upgrades_.fetch_add(1, std::memory_order_acq_rel);
  if (!move_path(Path::kTcp, Path::kRdma)) move_path(Path::kBackOnTcp, Path::kRdma);
  if (before != nullptr) close_later(before, -1);
  std::lock_guard lock(live_mutex());
  // Listed already when it was on RDMA before, here or (a copy of the list) in the parent.
  auto& live = live_sockets();
  if (std::find(live.begin(), live.end(), this) == live.end()) live.push_back(this);
  if (!named) live_by_serial().emplace(serial_, this);
}

void TrackedSocket::hand_over_to_children(transport::RdmaStream* s) noexcept {
  note_handing_back(serial_);  // a child's claim from now on waits for the answer
  if (!back_on_tcp()) {
    hand_back_later(s, serial_);  // stream_closer.h: moved back to TCP off this thread
    return;
  }
  // Moved back already (for one child, by the peer, by a failover): what is left of the prefix is the
  // children's (a queue made to be shared stays one: a later claim maps it too); the stream disconnects.
  HandBack answer;
  answer.then_end = prefix.then_end();
  answer.shared_prefix = prefix.shareable();
  bool kept = answer.shared_prefix || prefix.take_all(&answer.bytes);
  answer.outcome = kept ? HandBack::Outcome::kMoved : HandBack::Outcome::kFailed;
  answer.alone = true;  // this process's last descriptor is gone: only children hold it
  keep_handed_back(serial_, std::move(answer));
  close_later(s, -1);
}

void replace_with_unconnected_socket(int fd, int domain) noexcept {
  int placeholder = real().socket(domain, SOCK_STREAM, 0);
  if (placeholder >= 0) {
    int fd_flags = real().fcntl(fd, F_GETFD);
    real().dup3(placeholder, fd, fd_flags > 0 && (fd_flags & FD_CLOEXEC) ? O_CLOEXEC : 0);
    real().close(placeholder);
  }
  track_close(fd);
}

void replace_all_with_unconnected_sockets(TrackedSocket* socket) noexcept {
  int domain = socket->domain();
  int end = fd_table().high_water();
  for (int fd = 0; fd < end; ++fd) {
    if (fd_table().find(fd) == socket) replace_with_unconnected_socket(fd, domain);
  }
}

void reset_connection(int fd) noexcept {
  sockaddr unspec{};
  unspec.sa_family = AF_UNSPEC;
  real().connect(fd, &unspec, sizeof unspec);
}

void close_streams_at_exit() noexcept {
  // Upgrades still on TCP stay there: their thread will not outlive the process.
  settle_all_sessions();
  {
    // Held for the whole pass: a thread that lets go of the last reference meanwhile waits in the
    // destructor. Idempotent with the destructor's end later. Sockets copied from a parent by fork
    // have no stream here (stream() is null). Every end is queued first, then all are waited for
    // together, within one timeout: many streams cost no more than one.
    std::lock_guard lock(live_mutex());
    auto deadline = transport::Deadline::in(std::chrono::milliseconds(0));
    for (TrackedSocket* socket : live_sockets()) {
      transport::RdmaStream* s = socket->stream();
      if (s == nullptr) continue;
      if (logged_reset_at_close(socket, s, socket->linger_seconds.load())) {
        s->abort();
        continue;
      }
      s->shutdown_write();
      deadline = transport::Deadline::later(deadline, transport::Deadline::in_ms(s->timeout_ms()));
    }
    for (TrackedSocket* socket : live_sockets()) {
      if (transport::RdmaStream* s = socket->stream()) log_unclean_end(s, s->close(deadline));
    }
  }
  finish_closing();  // streams whose descriptors were closed before exit
}

TrackedSocket::~TrackedSocket() {
  // The last descriptor is closed: like the kernel, deliver what was written before ending the
  // stream, even if the process exits right after close() (close() waits for the acknowledgements),
  // or reset it where the kernel would.
  // In a forked child the stream and the listener are the parent's: destroying them here would end
  // the parent's connection or listener (they share the rdma_cm descriptor). They are left alone.
  if (stream_.load() != nullptr || serial_ != 0) {
    std::lock_guard lock(live_mutex());
    auto& live = live_sockets();
    live.erase(std::remove(live.begin(), live.end(), this), live.end());
    live_by_serial().erase(serial_);
  }
  if (serial_ != 0) note_let_go(serial_);  // a child that claimed it may hold it alone now
  if (std::unique_ptr<DeferredUpgrade> deferred = take_deferred_upgrade()) {
    // The parent let go of a connection whose upgrade it deferred at a fork: the child that claims it
    // takes the upgrade up (PostgreSQL's postmaster closes its copy right after the fork).
    if (deferred->generation == fork_generation() && is_lent(serial_)) {
      note_handing_back(serial_);
      HandBack answer;
      answer.outcome = HandBack::Outcome::kResume;
      keep_handed_back(serial_, std::move(answer));
    }
    if (deferred->listener != nullptr) deferred->listener->release();
  } else if (serial_ != 0 && stream_.load() == nullptr && is_lent(serial_)) {
    // Deferred at a fork, taken up here (the child had not used it yet) and never on RDMA: the
    // children's copies are the connection, on TCP, as good as ours was.
    note_handing_back(serial_);
    HandBack answer;
    answer.outcome = HandBack::Outcome::kStaysTcp;
    keep_handed_back(serial_, std::move(answer));
  }
  if (transport::RdmaStream* s = own_stream()) {
    if (is_lent(serial_)) {
      hand_over_to_children(s);  // a child holds the connection still: it goes on there, on TCP
    } else {
      (void)logged_reset_at_close(this, s, linger_seconds.load());  // close_later decides again, alike
      close_later(s, linger_seconds.load());  // stream_closer.h: close() returns at once, as the kernel's
    }
  } else {
    transport::keep_forever(stream_.load());
  }
  delete listener_parts_.load();  // listener/listener_state.h
  delete session_.load();
  stats::close_slot(stats_slot.load(std::memory_order_relaxed));
}

}  // namespace tcp2rdma::preload
